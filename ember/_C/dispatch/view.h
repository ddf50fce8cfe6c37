/* View ops in C (included by _dispatch.c): the view function a view keeps, and dispatch.py's
 * _view, the common call of a view op (one plain cpu tensor, options after it, or a cpu
 * tensor no gradient reaches, read as its array: slice_inverse's src; no hooks),
 * for one output or a tuple of them (split, chunk, unbind: _view_outputs). _view is the
 * reference; what this does not take (a "maybe" view with several outputs, a forward that
 * refuses the call) goes back to Python. */

/* ---- ViewFn: b -> opdef(parent(b), *rest, **kwargs), dispatch.view_links's view_fn ------ */

typedef struct {
    PyObject_HEAD
    PyObject *opdef, *rest, *kwargs, *parent, *multi_output;   /* parent, kwargs may be NULL */
    vectorcallfunc vectorcall;
    Py_ssize_t nth;     /* output nth of an op with several (dispatch._nth_view), or -1 */
} ViewFn;

static PyObject *viewfn_call(PyObject *self, PyObject *const *av, size_t nargsf,
                             PyObject *kwnames)
{
    ViewFn *v = (ViewFn *)self;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)))
        return PyErr_Format(PyExc_TypeError, "a view function takes one tensor");
    PyObject *x = v->parent ? PyObject_CallOneArg(v->parent, av[0]) : Py_NewRef(av[0]), *r;
    if (x == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(v->rest);
    if (v->kwargs == NULL && n < 8) {
        PyObject *cargs[9] = {x};
        for (Py_ssize_t i = 0; i < n; i++)
            cargs[i + 1] = PyTuple_GET_ITEM(v->rest, i);
        r = PyObject_Vectorcall(v->opdef, cargs, n + 1, NULL);
    }
    else {
        PyObject *args = prepend(x, v->rest);
        if (args == NULL) {
            Py_DECREF(x);
            return NULL;
        }
        r = PyObject_Call(v->opdef, args, v->kwargs);
        Py_DECREF(args);
    }
    Py_DECREF(x);
    if (r != NULL && v->nth >= 0)
        Py_SETREF(r, PySequence_GetItem(r, v->nth));
    return r;
}

static int viewfn_traverse(PyObject *self, visitproc visit, void *arg)
{
    ViewFn *v = (ViewFn *)self;
    Py_VISIT(v->opdef);
    Py_VISIT(v->rest);
    Py_VISIT(v->kwargs);
    Py_VISIT(v->parent);
    Py_VISIT(v->multi_output);
    return 0;
}

static int viewfn_clear(PyObject *self)
{
    ViewFn *v = (ViewFn *)self;
    Py_CLEAR(v->opdef);
    Py_CLEAR(v->rest);
    Py_CLEAR(v->kwargs);
    Py_CLEAR(v->parent);
    Py_CLEAR(v->multi_output);
    return 0;
}

static void viewfn_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    viewfn_clear(self);
    Py_TYPE(self)->tp_free(self);
}

static PyMemberDef viewfn_members[] = {
    {"multi_output", T_OBJECT, offsetof(ViewFn, multi_output), 0,
     "the output index of a view of one of a multi-output view op's outputs, else None"},
    {NULL}};

static PyTypeObject ViewFnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember._C.dispatch._dispatch.ViewFn",
    .tp_basicsize = sizeof(ViewFn),
    .tp_dealloc = viewfn_dealloc,
    .tp_vectorcall_offset = offsetof(ViewFn, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = viewfn_traverse,
    .tp_clear = viewfn_clear,
    .tp_members = viewfn_members,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A view's view function: redoes the view ops from its base "
              "(dispatch.view_function).",
};

/* ViewFn(opdef, rest, kwargs, parent) with parent's multi_output; kwargs, parent: NULL or
 * None for none; new ref */
static PyObject *viewfn_new(PyObject *opdef, PyObject *rest, PyObject *kwargs, PyObject *parent)
{
    if (!PyTuple_Check(rest))
        return PyErr_Format(PyExc_TypeError, "view_function: rest must be a tuple");
    PyObject *mo = NULL;
    if (parent == Py_None)
        parent = NULL;
    if (parent != NULL && _PyObject_LookupAttr(parent, s_multi_output, &mo) < 0)
        return NULL;
    ViewFn *v = PyObject_GC_New(ViewFn, &ViewFnType);
    if (v == NULL) {
        Py_XDECREF(mo);
        return NULL;
    }
    v->opdef = Py_NewRef(opdef);
    v->rest = Py_NewRef(rest);
    v->kwargs = kwargs != NULL && kwargs != Py_None && PyDict_GET_SIZE(kwargs) ?
        Py_NewRef(kwargs) : NULL;
    v->parent = Py_XNewRef(parent);
    v->multi_output = mo != NULL && mo != Py_None ? mo : NULL;
    if (mo == Py_None)
        Py_DECREF(mo);
    v->vectorcall = viewfn_call;
    v->nth = -1;
    PyObject_GC_Track(v);
    return (PyObject *)v;
}

/* view_function(opdef, rest, kwargs, parent_fn): for dispatch.py */
static PyObject *view_function(PyObject *self, PyObject *const *av, Py_ssize_t n)
{
    if (n != 4)
        return PyErr_Format(PyExc_TypeError, "view_function: 4 arguments, got %zd", n);
    return viewfn_new(av[0], av[1], av[2], av[3]);
}

/* ---- dispatch._view for one output ------------------------------------------------------- */

/* the array whose memory arr views, as _storage._root, for a chain of plain ndarrays; None
 * where another kind of base sits in the chain (the caller asks _root); new ref */
static PyObject *root_array(PyObject *arr)
{
    PyObject *a = Py_NewRef(arr);
    for (;;) {
        PyObject *b = ND(a, ND_BASE, s_base_arr);
        if (b == NULL) {
            Py_DECREF(a);
            return NULL;
        }
        if (b == Py_None) {
            Py_DECREF(b);
            return a;
        }
        Py_DECREF(a);
        if (Py_TYPE(b) != (PyTypeObject *)ndarray) {
            Py_DECREF(b);
            return Py_NewRef(Py_None);
        }
        a = b;
    }
}

/* whether res shares src's memory, as _view asks of a "maybe" view (reshape); -1 on error */
static int same_root(PyObject *res, PyObject *src)
{
    PyObject *r1 = root_array(res), *r2 = r1 ? root_array(src) : NULL;
    int r = -1;
    if (r1 != NULL && r2 != NULL) {
        if (r1 != Py_None && r2 != Py_None)
            r = r1 == r2;
        else {      /* (an as_strided DummyArray in the chain) */
            PyObject *a = PyObject_CallOneArg(root_fn, res);
            PyObject *b = a ? PyObject_CallOneArg(root_fn, src) : NULL;
            if (b != NULL)
                r = a == b;
            Py_XDECREF(a);
            Py_XDECREF(b);
        }
    }
    Py_XDECREF(r1);
    Py_XDECREF(r2);
    return r;
}

/* out's storage, base, view function and view version, as _view sets them (view_links);
 * nth >= 0: out is output nth of several, whose view function picks it (_nth_view) */
static int link_view(PyObject *out, PyObject *opdef, PyObject *src, PyObject *rest,
                     Py_ssize_t nth)
{
    PyObject *st = TF(src, storage, Py_None), *ver;
    st = st != Py_None ? Py_NewRef(st) : PyObject_CallMethodNoArgs(src, s_get_storage);
    if (st == NULL)
        return -1;
    PyObject *base = TF(src, base, Py_None), *fn = viewfn_new(opdef, rest, NULL,
                                                             TF(src, view_fn, Py_None));
    if (fn != NULL && nth >= 0) {
        ViewFn *v = (ViewFn *)fn;
        v->nth = nth;
        Py_XSETREF(v->multi_output, PyLong_FromSsize_t(nth));
        if (v->multi_output == NULL)
            Py_CLEAR(fn);
    }
    if (fn == NULL) {
        Py_DECREF(st);
        return -1;
    }
    Py_XSETREF(TB(out)->base, Py_NewRef(base != Py_None ? base : src));
    Py_XSETREF(TB(out)->view_fn, fn);
    Py_XSETREF(TB(out)->storage, st);
    if (Py_TYPE(st) == Storage && (ver = *(PyObject **)((char *)st + storage_off[ST_VERSION])))
        Py_INCREF(ver);
    else if ((ver = GET(st, s_version)) == NULL)
        return -1;
    Py_XSETREF(TB(out)->view_version, ver);      /* (see graph.edge_of) */
    return 0;
}

/* whether a view of src by opdef records a node: src requires grad, grad mode is on and the
 * op is differentiable (1, 0, or -1 with an exception) */
static int view_records(PyObject *opdef, PyObject *src)
{
    PyObject *rg = TF(src, requires_grad, Py_False);
    int r = rg == Py_True ? 1 : rg == Py_False ? 0 : PyObject_IsTrue(rg);
    if (r > 0 && (r = GRAD_ENABLED()) > 0)
        r = op_truth(opdef, OP_DIFF);
    return r;
}

/* dispatch._view_outputs for a tuple of arrays (split, unbind, chunk): the views, linked to
 * src, each with its own view function, and the op's node where src requires grad; the
 * Python helper takes anything else; new ref */
static PyObject *several_views(PyObject *opdef, PyObject *args, PyObject *src, PyObject *rest,
                               PyObject *res)
{
    Py_ssize_t k = PyTuple_CheckExact(res) ? PyTuple_GET_SIZE(res) : 0;
    PyObject *view = OP(opdef, OP_VIEW), *outs, *v;
    int maybe = view == NULL ? -1 : PyUnicode_Check(view);
    Py_XDECREF(view);
    if (maybe < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < k && !maybe; i++)
        maybe = Py_TYPE(PyTuple_GET_ITEM(res, i)) != (PyTypeObject *)ndarray;
    if (k == 0 || maybe)
        return PyObject_CallFunctionObjArgs(view_outputs, opdef, args, src, rest, res, NULL);
    if ((outs = PyList_New(k)) == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *o = wrap_like(PyTuple_GET_ITEM(res, i), TB(src)->dtype);
        if (o == NULL)
            goto error;
        PyList_SET_ITEM(outs, i, o);
        if (link_view(o, opdef, src, rest, i) < 0)
            goto error;
    }
    int r = view_records(opdef, src);
    if (r < 0)
        goto error;
    if (r) {
        PyObject *tensors = PyList_New(1);
        if (tensors == NULL)
            goto error;
        PyList_SET_ITEM(tensors, 0, Py_NewRef(src));
        v = PyObject_CallFunctionObjArgs(record, opdef, args, empty_dict, tensors, outs, Py_True,
                                         NULL);
        Py_DECREF(tensors);
        if (v == NULL)
            goto error;
        Py_DECREF(v);
    }
    v = PyList_AsTuple(outs);
    Py_DECREF(outs);
    return v;
error:
    Py_DECREF(outs);
    return NULL;
}

/* _view(opdef, args) for one plain cpu tensor and options; *handled = 0: not taken (run the
 * Python dispatch, which also words any error of the forward) */
static PyObject *view_path(PyObject *opdef, PyObject *args, int *handled)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *src = n ? PyTuple_GET_ITEM(args, 0) : NULL, *res, *out = NULL, *ret = NULL;
    *handled = 0;
    if (src == NULL || n > 9 || !PyObject_TypeCheck(src, Tensor) || TF(src, device, CPU) != CPU ||
        TB(src)->data == NULL || TB(src)->dtype == NULL)
        return NULL;
    PyObject *fwd, *cargs[10] = {np, TB(src)->data};
    for (Py_ssize_t i = 1; i < n; i++) {
        /* (a cpu tensor no gradient reaches is read as its array: slice_inverse's src) */
        PyObject *a = cargs[i + 1] = PyTuple_GET_ITEM(args, i);
        if (PyObject_TypeCheck(a, Tensor)) {
            if (TF(a, device, CPU) != CPU || TF(a, requires_grad, Py_False) != Py_False ||
                (cargs[i + 1] = TB(a)->data) == NULL)
                return NULL;
            if ((fwd = OP(opdef, OP_PROMOTE)) == NULL)
                return *handled = 1, NULL;
            Py_DECREF(fwd);
            if (fwd != Py_None)
                return NULL;
        }
    }
    if ((fwd = OP(opdef, OP_FWD)) == NULL)
        return *handled = 1, NULL;
    res = PyObject_Vectorcall(fwd, cargs, n + 1, NULL);
    Py_DECREF(fwd);
    *handled = 1;
    if (res == NULL) {
        *handled = !refused();
        return NULL;
    }
    PyObject *rest = PyTuple_GetSlice(args, 1, n);
    if (rest == NULL)
        goto done;
    if (Py_TYPE(res) != (PyTypeObject *)ndarray) {      /* several outputs */
        ret = several_views(opdef, args, src, rest, res);
        if (ret == Py_None) {           /* (neither: the general path's) */
            Py_CLEAR(ret);
            *handled = 0;
        }
        goto done;
    }
    if ((out = wrap_like(res, TB(src)->dtype)) == NULL)
        goto done;
    PyObject *view = OP(opdef, OP_VIEW);
    if (view == NULL)
        goto done;
    int r = PyUnicode_Check(view) ? same_root(res, TB(src)->data) : 1;    /* ("maybe") */
    Py_DECREF(view);
    if (r < 0 || (r && link_view(out, opdef, src, rest, -1) < 0))
        goto done;
    if ((r = view_records(opdef, src)) < 0)
        goto done;
    if (r) {
        PyObject *tensors = PyTuple_Pack(1, src);
        r = tensors == NULL ? -1 : record_one(opdef, args, empty_dict, tensors, AT0, out, NULL,
                                              NULL);
        Py_XDECREF(tensors);
        if (r < 0)
            goto done;
    }
    ret = Py_NewRef(out);
done:
    Py_XDECREF(rest);
    Py_XDECREF(out);
    Py_DECREF(res);
    return ret;
}
