/* What the backward loop (engine.h) asks of a node, without attribute lookups where it can
 * (included by engine.h): whether a SimpleNode or AccumulateGrad is "bare" (no hooks, no
 * anomaly trace: every such attribute still its class default), a leaf's accumulation
 * (graph.AccumulateGrad.accumulate, the reference) for its common case, and a SimpleNode's
 * apply() and release() (OpNode's are the reference). */

static PyTypeObject *AccType;           /* graph.AccumulateGrad */
static Py_ssize_t off_variable;         /* its ``_variable`` slot (a weakref to the leaf) */
static PyObject *s_clone_base;          /* "base" (an ndarray's) */
static PyObject *s_grad_layout, *s_strides;     /* "grad_layout" (grad_mode.state's), "strides" */
static FlagCache layout_flag;

/* tp's class-level hook attributes are empty, _trace None and n_outputs 1. Cached on the
 * type's version tag, which Python changes whenever tp or a base class is assigned to. */
static int class_plain(PyTypeObject *tp, unsigned int *tag)
{
    if (*tag != 0 && (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && tp->tp_version_tag == *tag)
        return 1;
    *tag = 0;
    PyObject *names[4] = {s_tensor_pre_hooks, s_retain_grad_hooks, s_pre_hooks, s_hooks};
    for (int i = 0; i < 4; i++) {
        PyObject *v = _PyType_Lookup(tp, names[i]);     /* (borrowed) */
        int r = v == NULL ? 1 : PyObject_IsTrue(v);
        if (r != 0) {
            PyErr_Clear();      /* (an error here only means "not plain") */
            return 0;
        }
    }
    PyObject *tr = _PyType_Lookup(tp, s_trace), *no = _PyType_Lookup(tp, s_n_outputs);
    if (tr != Py_None || no == NULL || !PyLong_CheckExact(no) || PyLong_AsLong(no) != 1) {
        PyErr_Clear();
        return 0;
    }
    /* (_PyType_Lookup assigned the tag; without one, the check runs each time) */
    if (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)
        *tag = tp->tp_version_tag;
    return 1;
}

/* node is a SimpleNode or AccumulateGrad with nothing in its instance dict and plain class
 * defaults: it has no tensor/pre/post hooks, no retain_grad hook, no trace, one output */
static int node_bare(PyObject *node)
{
    static unsigned int tag_simple, tag_acc;
    unsigned int *tag;
    PyTypeObject *tp = Py_TYPE(node);
    if (IS_SIMPLE(node))
        tp = SimpleNode, tag = &tag_simple;     /* (its class adds nothing: node_class) */
    else if (tp == AccType)
        tag = &tag_acc;
    else
        return 0;
    PyObject **dp = _PyObject_GetDictPtr(node);
    if (dp != NULL && *dp != NULL && PyDict_GET_SIZE(*dp))
        return 0;
    return class_plain(tp, tag);
}

/* AccumulateGrad.accumulate(g, create_graph) without create_graph for a bare accumulator:
 * the leaf is gone (nothing to do), or its .grad is None and g is a gradient nothing else can
 * reach (.grad takes it), and the leaf has no post-accumulate hooks. 1 done, 0 not taken (the
 * Python method runs), -1 error. g is borrowed from the engine's list, which holds it. */
static int accumulate_leaf(PyObject *node, PyObject *g, PyObject *create)
{
    PyObject *ref = *(PyObject **)((char *)node + off_variable), *v, *d, *b;
    if (create != Py_False || ref == NULL || !PyWeakref_CheckRefExact(ref))
        return 0;
    if ((v = PyWeakref_GET_OBJECT(ref)) == Py_None)
        return 1;
    if (!PyObject_TypeCheck(v, Tensor) || !PyObject_TypeCheck(g, Tensor) ||
        TF(v, grad, Py_None) != Py_None || TF(v, post_acc_hooks, Py_None) != Py_None)
        return 0;
    /* as the Python test: the engine's list alone holds g; g alone holds its array, which
     * owns its memory; no storage, no base (a view or alias would add a reference) */
    d = TB(g)->data;
    if (Py_REFCNT(g) > 1 || d == NULL || Py_REFCNT(d) > 1 || TF(g, storage, Py_None) != Py_None ||
        TF(g, base, Py_None) != Py_None)
        return 0;
    if ((b = ND(d, ND_BASE, s_clone_base)) == NULL)
        return -1;
    Py_DECREF(b);
    if (b != Py_None)
        return 0;
    /* the gradient layout contract (graph._laid_out): a gradient strided unlike its leaf is
     * the Python path's to lay out */
    int lay = flag(grad_state, s_grad_layout, &layout_flag), same = 1;
    if (lay < 0)
        return -1;
    if (lay && TB(v)->data != NULL) {
        /* (no strides: a sparse operand; the Python path decides) */
        PyObject *a = ND(TB(v)->data, ND_STRIDES, s_strides), *c = NULL;
        if (a == NULL || (c = ND(d, ND_STRIDES, s_strides)) == NULL) {
            Py_XDECREF(a);
            PyErr_Clear();
            return 0;
        }
        same = PyObject_RichCompareBool(a, c, Py_EQ);
        Py_DECREF(a);
        Py_DECREF(c);
        if (same <= 0)
            return same;
    }
    Py_XSETREF(TB(v)->grad, Py_NewRef(g));
    return 1;
}

/* ---- a SimpleNode's apply() and release() (OpNode's are the reference) ------------------- */

/* the saved tensors are unchanged (as at recording); -1 on error */
static int versions_ok(PyObject *versions)
{
    PyObject *seq = PySequence_Fast(versions, "versions");
    if (seq == NULL)
        return -1;
    int ok = 1;
    for (Py_ssize_t i = 0; ok == 1 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *tv = PySequence_Fast_GET_ITEM(seq, i), *v;
        if (!PyTuple_Check(tv) || PyTuple_GET_SIZE(tv) != 2) {
            ok = 0;
            break;
        }
        if ((v = version_of(PyTuple_GET_ITEM(tv, 0))) == NULL) {
            ok = -1;
            break;
        }
        ok = PyObject_RichCompareBool(v, PyTuple_GET_ITEM(tv, 1), Py_EQ);
        Py_DECREF(v);
    }
    Py_DECREF(seq);
    return ok;
}

/* node.apply(grads) for a SimpleNode in the common case: not released, its saved tensors
 * unchanged, no graph of the backward (create_graph). Anything else: *handled = 0 and
 * OpNode.apply runs (it raises the errors). */
static PyObject *simple_apply(PyObject *node, PyObject *grads, int *handled)
{
    PyObject *opdef = SLOT(node, N_OPDEF), *pos = SLOT(node, N_POS), *args = SLOT(node, N_ARGS);
    PyObject *res = NULL, *vjp = NULL, *out = NULL, *prev = NULL, *kwnames = NULL;
    int r;
    *handled = 0;
    if (SLOT(node, N_RELEASED) != Py_False || SLOT(node, N_KWARGS) != no_kwargs ||
        !PyList_CheckExact(args) || !PyList_CheckExact(grads) || PyList_GET_SIZE(grads) < 1 ||
        (pos != AT0 && pos != AT1 && pos != AT01))
        return NULL;
    if ((r = versions_ok(SLOT(node, N_VERSIONS))) <= 0)
        return r < 0 ? (*handled = 1, NULL) : NULL;
    if ((r = op_truth(opdef, OP_SAVE_RESULT)) < 0)
        return *handled = 1, NULL;
    if (r && SLOT(node, N_RESULTS) != Py_None) {  /* result=: the saved output, checked, with no
                                                     graph of its own (None: not saved) */
        PyObject *rs = SLOT(node, N_RESULTS), *rv;
        if ((r = GRAD_ENABLED()) != 0)
            return r < 0 ? (*handled = 1, NULL) : NULL;
        if (!PyList_CheckExact(rs) || PyList_GET_SIZE(rs) != 1)
            return NULL;
        rv = PyList_GET_ITEM(rs, 0);
        if (!PyTuple_Check(rv) || PyTuple_GET_SIZE(rv) != 2 || PyTuple_GET_ITEM(rv, 1) == Py_None)
            return NULL;
        PyObject *one = PyList_New(1);
        if (one == NULL)
            return *handled = 1, NULL;
        PyList_SET_ITEM(one, 0, Py_NewRef(rv));
        r = versions_ok(one);
        Py_DECREF(one);
        if (r <= 0)
            return r < 0 ? (*handled = 1, NULL) : NULL;
        res = PyTuple_GET_ITEM(rv, 0);
    }
    *handled = 1;
    if ((vjp = OP(opdef, OP_VJP)) == NULL)
        return NULL;
    Py_ssize_t na = PyList_GET_SIZE(args);
    PyObject *small[8], **av = na + 2 <= 8 ? small : PyMem_Malloc((na + 2) * sizeof *av);
    if (av == NULL) {
        Py_DECREF(vjp);
        return PyErr_NoMemory();
    }
    av[0] = PyList_GET_ITEM(grads, 0);
    for (Py_ssize_t i = 0; i < na; i++)
        av[i + 1] = PyList_GET_ITEM(args, i);
    if (res != NULL) {
        av[na + 1] = res;
        kwnames = kw_result;
    }
    /* graph._running = node while the vjp runs (needs_input_grad) */
    if ((prev = PyObject_GetAttr(graph_mod, s_running)) != NULL &&
        PyObject_SetAttr(graph_mod, s_running, node) == 0) {
        out = PyObject_Vectorcall(vjp, av, na + 1, kwnames);
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        if (PyObject_SetAttr(graph_mod, s_running, prev) < 0)
            Py_CLEAR(out);
        if (t != NULL)
            PyErr_Restore(t, v, tb);
    }
    Py_XDECREF(prev);
    Py_DECREF(vjp);
    if (av != small)
        PyMem_Free(av);
    if (out == NULL)
        return NULL;
    if (!PyTuple_Check(out))
        Py_SETREF(out, PyTuple_Pack(1, out));
    if (out == NULL || pos == AT0 || (pos == AT01 && PyTuple_GET_SIZE(out) >= 2))
        return out;
    /* one gradient per tensor input, in the order of the edges */
    Py_ssize_t np_ = PyTuple_GET_SIZE(pos);
    PyObject *flat = PyList_New(np_);
    for (Py_ssize_t k = 0; flat != NULL && k < np_; k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(PyTuple_GET_ITEM(pos, k), 0));
        PyList_SET_ITEM(flat, k, Py_NewRef(i < PyTuple_GET_SIZE(out) ?
                                           PyTuple_GET_ITEM(out, i) : Py_None));
    }
    Py_DECREF(out);
    return flat;
}

static void simple_release(PyObject *node)      /* OpNode.release */
{
    if (SLOT(node, N_HAS_SAVED) != Py_True)
        return;
    int idx[3] = {N_ARGS, N_VERSIONS, N_RESULTS};
    for (int i = 0; i < 3; i++)
        Py_XSETREF(SLOT(node, idx[i]), Py_NewRef(Py_None));
    Py_XSETREF(SLOT(node, N_RELEASED), Py_NewRef(Py_True));
}
