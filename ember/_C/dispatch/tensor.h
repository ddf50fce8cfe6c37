/* TensorBase: the C base type of ember.Tensor, holding its hot fields (included by
 * _dispatch.c; ember/_tensor.py says which fields and why).
 *
 * A Tensor's autograd and storage state (_data, dtype, device, grad_fn, _requires_grad, ...)
 * used to live in its instance dict, with class-level defaults on Tensor: every read of a
 * default went through the type's MRO and every write grew the dict, on every
 * recorded op. Here they are fixed slots: C reads and writes them by offset, and Python's
 * specialised LOAD_ATTR_SLOT / STORE_ATTR_SLOT reach them in a few instructions.
 * Tensor (a Python subclass) keeps a __dict__ and __weakref__ for anything else.
 *
 * Defaults: a slot member (T_OBJECT_EX) that is NULL raises AttributeError, so every new
 * tensor gets its defaults when it is allocated. TensorBase keeps object's tp_new (so
 * ``object.__new__(Tensor)``, which ember and its users call, stays legal) and instead each
 * subclass's tp_alloc is set to tensor_alloc when the subclass is made (__init_subclass__):
 * object.__new__ allocates through tp_alloc. ``grad`` is a T_OBJECT member (NULL reads as
 * None), so ``del t.grad`` clears it, as in torch. C code still treats a NULL slot as its
 * default (a subclass whose __init_subclass__ skipped ours, a ``del``): see TF(). */

/* every field once: (C name, Python name, member type); the struct, the member table,
 * traverse and clear expand it. grad is T_OBJECT (NULL reads as None), and so are leaf_edge,
 * record.h's cache of a leaf's (accumulator, 0) edge, which no Python code reads, and
 * view_version, a view's storage version when it was made (see graph.edge_of): a slot, as a
 * dict entry it cost every view its instance dict. */
#define TENSOR_FIELDS(X)                                                                    \
    X(data, "_data", T_OBJECT_EX) X(dtype, "dtype", T_OBJECT_EX)                            \
    X(device, "device", T_OBJECT_EX) X(grad, "grad", T_OBJECT)                              \
    X(grad_fn, "grad_fn", T_OBJECT_EX) X(requires_grad, "_requires_grad", T_OBJECT_EX)      \
    X(storage, "_storage", T_OBJECT_EX) X(base, "_base", T_OBJECT_EX)                       \
    X(view_fn, "_view_fn", T_OBJECT_EX) X(output_nr, "_output_nr", T_OBJECT_EX)             \
    X(grad_acc, "_grad_acc", T_OBJECT_EX) X(post_acc_hooks, "_post_acc_hooks", T_OBJECT_EX) \
    X(retains_grad, "_retains_grad", T_OBJECT_EX) X(leaf_edge, "_leaf_edge", T_OBJECT)    \
    X(view_version, "_view_version", T_OBJECT)

#define TENSOR_FIELD_DECL(f, name, kind) PyObject *f;
typedef struct {
    PyObject_HEAD
    TENSOR_FIELDS(TENSOR_FIELD_DECL)
} TensorObject;

#define TB(o) ((TensorObject *)(o))
/* a field of a TensorBase instance (borrowed), its default when NULL */
#define TF(o, f, dflt) (TB(o)->f != NULL ? TB(o)->f : (dflt))
/* a field that has no default (_data, dtype), new reference: getattr raises AttributeError
 * when it was never set */
#define TGET(o, f, name) (TB(o)->f != NULL ? Py_NewRef(TB(o)->f) : PyObject_GetAttr((o), (name)))

static PyObject *t_cpu;         /* the default device (tensor_defaults) */
static PyObject *t_zero;        /* 0, the default _output_nr */

#define TENSOR_MEMBER(f, name, kind) {name, kind, offsetof(TensorObject, f), 0, NULL},
static PyMemberDef tensor_members[] = {
    TENSOR_FIELDS(TENSOR_MEMBER)
    {NULL}};

static void tensor_fill_defaults(TensorObject *t)
{
    PyObject **none[] = {&t->grad, &t->grad_fn, &t->storage, &t->base, &t->view_fn,
                         &t->grad_acc, &t->post_acc_hooks};
    for (size_t i = 0; i < sizeof none / sizeof *none; i++)
        *none[i] = Py_NewRef(Py_None);
    t->requires_grad = Py_NewRef(Py_False);
    t->retains_grad = Py_NewRef(Py_False);
    t->output_nr = Py_NewRef(t_zero);
    t->device = Py_XNewRef(t_cpu);
}

/* every TensorBase subclass's tp_alloc: the generic allocation, then the defaults */
static PyObject *tensor_alloc(PyTypeObject *tp, Py_ssize_t n)
{
    PyObject *o = PyType_GenericAlloc(tp, n);
    if (o != NULL)
        tensor_fill_defaults(TB(o));
    return o;
}

/* a new plain Tensor (type tp) holding array data (a new reference is taken) of dtype dt */
static PyObject *tensor_new(PyTypeObject *tp, PyObject *data, PyObject *dt)
{
    PyObject *o = tp->tp_alloc(tp, 0);
    if (o == NULL)
        return NULL;
    Py_XSETREF(TB(o)->data, Py_NewRef(data));
    Py_XSETREF(TB(o)->dtype, Py_NewRef(dt));
    return o;
}

static int tensor_traverse(PyObject *o, visitproc visit, void *arg)
{
    TensorObject *t = TB(o);
#define TENSOR_VISIT(f, name, kind) Py_VISIT(t->f);
    TENSOR_FIELDS(TENSOR_VISIT)
    return 0;
}

static int tensor_clear(PyObject *o)
{
    TensorObject *t = TB(o);
#define TENSOR_CLEAR(f, name, kind) Py_CLEAR(t->f);
    TENSOR_FIELDS(TENSOR_CLEAR)
    return 0;
}

static void tensor_dealloc(PyObject *o)
{
    /* (subtype_dealloc re-tracks the object before calling a GC base's dealloc) */
    PyObject_GC_UnTrack(o);
    tensor_clear(o);
    Py_TYPE(o)->tp_free(o);
}

/* __init_subclass__: the subclass allocates with its defaults (see the top of this file) */
static PyObject *tensor_init_subclass(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) || (kwargs != NULL && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "TensorBase.__init_subclass__() takes no arguments");
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)cls;
    if (tp->tp_alloc == PyType_GenericAlloc)
        tp->tp_alloc = tensor_alloc;
    Py_RETURN_NONE;
}

/* ---- Size: a shape, a tuple whose slices are Sizes ---------------------------------------
 * ember.Size subclasses SizeBase for its indexing: ``x.shape[0]`` was a Python frame
 * (Size.__getitem__) on top of the tuple's. */
static PyTypeObject *t_size;    /* ember.Size (tensor_defaults) */
static PyObject *s_shape;       /* "shape" (also record.h's) */

static PyObject *size_subscript(PyObject *self, PyObject *item)
{
    if (PyLong_CheckExact(item)) {
        Py_ssize_t n = PyTuple_GET_SIZE(self), i = PyLong_AsSsize_t(item);
        if (i == -1 && PyErr_Occurred())
            return NULL;
        if (i < 0)
            i += n;
        if (i < 0 || i >= n) {
            PyErr_SetString(PyExc_IndexError, "tuple index out of range");
            return NULL;
        }
        return Py_NewRef(PyTuple_GET_ITEM(self, i));
    }
    PyObject *r = PyTuple_Type.tp_as_mapping->mp_subscript(self, item);
    if (r == NULL || !PySlice_Check(item))
        return r;
    Py_SETREF(r, PyObject_CallOneArg((PyObject *)Py_TYPE(self), r));
    return r;
}

static PyMappingMethods size_mapping = {.mp_subscript = size_subscript};

static PyTypeObject SizeBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C.dispatch._dispatch.SizeBase",
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_as_mapping = &size_mapping,
    .tp_doc = "ember.Size's indexing: an int gives the dimension, a slice a Size.",
};

/* a new Size (t_size) holding the items of tuple t */
static PyObject *size_of(PyObject *t)
{
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    PyObject *s = t_size->tp_alloc(t_size, n);
    if (s != NULL)
        for (Py_ssize_t i = 0; i < n; i++)
            PyTuple_SET_ITEM(s, i, Py_NewRef(PyTuple_GET_ITEM(t, i)));
    return s;
}

/* Tensor.shape: the array's shape as a Size */
static PyObject *tensor_shape(PyObject *self, void *closure)
{
    PyObject *data = TGET(self, data, s_data), *shape;
    if (data == NULL)
        return NULL;
    shape = ND(data, ND_SHAPE, s_shape);
    Py_DECREF(data);
    if (shape == NULL || t_size == NULL || !PyTuple_Check(shape))
        return shape;
    Py_SETREF(shape, size_of(shape));
    return shape;
}

static PyGetSetDef tensor_getset[] = {
    {"shape", tensor_shape, NULL, "The tensor's shape, a Size (like ``torch.Size``).", NULL},
    {NULL}};

static PyMethodDef tensor_methods[] = {
    {"__init_subclass__", (PyCFunction)(void (*)(void))tensor_init_subclass,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "Subclasses allocate with the fields' defaults."},
    {NULL}};

static PyTypeObject TensorBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C.dispatch._dispatch.TensorBase",
    .tp_basicsize = sizeof(TensorObject),
    .tp_dealloc = tensor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = tensor_traverse,
    .tp_clear = tensor_clear,
    .tp_members = tensor_members,
    .tp_methods = tensor_methods,
    .tp_getset = tensor_getset,
    .tp_alloc = tensor_alloc,
    .tp_doc = "ember.Tensor's fields in fixed slots (ember/_C/dispatch/tensor.h).",
};

/* tensor_defaults(cpu, Size): the device a new tensor has, and the type of its shape */
static PyObject *tensor_defaults(PyObject *self, PyObject *const *av, Py_ssize_t n)
{
    if (n != 2 || !PyType_Check(av[1]) || !PyType_IsSubtype((PyTypeObject *)av[1],
                                                              &SizeBaseType)) {
        PyErr_SetString(PyExc_TypeError, "tensor_defaults(cpu, Size)");
        return NULL;
    }
    Py_XSETREF(t_cpu, Py_NewRef(av[0]));
    Py_XSETREF(t_size, (PyTypeObject *)Py_NewRef(av[1]));
    Py_RETURN_NONE;
}
