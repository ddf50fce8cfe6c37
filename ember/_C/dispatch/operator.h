/* Tensor's Python operators (``Tensor.__add__``...) as one C callable type (included by
 * _dispatch.c; ``_tensor_methods._binary`` is the reference): the operand check, then
 * dispatch's run(). */

typedef struct {
    PyObject_HEAD
    PyObject *opdef;
    int reflected;
    vectorcallfunc vectorcall;
} Operator;

static PyObject *operator_call(PyObject *self, PyObject *const *av, size_t nargsf,
                               PyObject *kwnames)
{
    Operator *op = (Operator *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "an operator takes (self, other)");
        return NULL;
    }
    PyObject *o = av[1];
    int r = PyObject_TypeCheck(o, Tensor) || PyFloat_CheckExact(o) || PyLong_CheckExact(o) ?
        1 : PyObject_IsInstance(o, operands);
    if (r < 0)
        return NULL;
    if (r == 0)     /* NotImplemented, or TypeError for a foreign tensor */
        return PyObject_CallFunctionObjArgs(not_operand, av[0], o, op->opdef, NULL);
    PyObject *args = op->reflected ? PyTuple_Pack(2, av[1], av[0]) : PyTuple_Pack(2, av[0], av[1]);
    if (args == NULL)
        return NULL;
    PyObject *ret = run(op->opdef, args, empty_dict);
    Py_DECREF(args);
    return ret;
}

static PyObject *operator_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static void operator_dealloc(PyObject *self)
{
    Py_XDECREF(((Operator *)self)->opdef);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *operator_repr(PyObject *self)
{
    Operator *op = (Operator *)self;
    return PyUnicode_FromFormat("<ember operator %R%s>", op->opdef,
                                op->reflected ? " (reflected)" : "");
}

static PyTypeObject OperatorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C.dispatch._dispatch.Operator",
    .tp_basicsize = sizeof(Operator),
    .tp_dealloc = operator_dealloc,
    .tp_vectorcall_offset = offsetof(Operator, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = operator_repr,
    .tp_descr_get = operator_get,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A Python operator of Tensor: not_operand's answer for a foreign operand, else the "
              "op's dispatch (``_tensor_methods._binary``).",
};

static PyObject *make_operator(PyObject *self, PyObject *args)
{
    PyObject *opdef;
    int reflected;
    if (!PyArg_ParseTuple(args, "Op", &opdef, &reflected))
        return NULL;
    Operator *op = PyObject_New(Operator, &OperatorType);
    if (op == NULL)
        return NULL;
    op->opdef = Py_NewRef(opdef);
    op->reflected = reflected;
    op->vectorcall = operator_call;
    return (PyObject *)op;
}
