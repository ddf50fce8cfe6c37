/* graph.simple_node in C (included by _dispatch.c; that function is the reference).
 *
 * The node is a graph.SimpleNode, whose fields are slots: they are stored here by offset, with
 * no attribute lookups and no instance dict. Inside saved_tensors_hooks or anomaly mode the
 * Python function runs (it makes the general OpNode). */

static PyTypeObject *SimpleNode;
/* a node of dispatch's: of a class graph.node_class made, named as torch names the node, that
 * adds nothing to SimpleNode */
#define IS_SIMPLE(node) (Py_TYPE(node)->tp_base == SimpleNode || Py_TYPE(node) == SimpleNode)
static PyObject *saved_hooks, *anomaly, *seq_iter, *meta_type, *no_kwargs, *no_edge, *edge_of,
    *zero;
static PyObject *s_base, *s_output_nr, *s_grad_acc, *s_grad_accumulator, *s_shape, *s_save,
    *s_needed_by, *s_save_result, *s_version, *s_storage, *s_alias, *s_enabled;
enum {N_NEXT, N_META, N_SEQ, N_OPDEF, N_KWARGS, N_POS, N_ARGS, N_VERSIONS, N_HAS_SAVED, N_OUTS,
      N_RESULTS, N_RELEASED, N_SLOTS};
static const char *node_slots[N_SLOTS] = {
    "next_functions", "input_meta", "seq", "opdef", "kwargs", "tensor_positions", "args",
    "versions", "_has_saved", "_outs", "results", "_released"};
static Py_ssize_t node_off[N_SLOTS];

#define SLOT(node, i) (*(PyObject **)((char *)(node) + node_off[i]))

/* _storage.UntypedStorage: its slots, by offset */
static PyTypeObject *Storage;
static PyObject *s_base_arr;
enum {ST_ARRAY, ST_VERSION, ST_DEVICE, ST_SLOTS};
static const char *storage_slots[ST_SLOTS] = {"_array", "_version", "device"};
static Py_ssize_t storage_off[ST_SLOTS];

/* out._alias() for the fast path's output (a plain cpu Tensor, no base, no storage yet) of
 * array res and dtype odt: out gets its storage, as _get_storage makes it, and the alias
 * shares it; new ref */
static PyObject *saved_output(PyObject *out, PyObject *res, PyObject *odt)
{
    PyObject *st, *al, *b = ND(res, ND_BASE, s_base_arr);
    if (b == NULL)
        return NULL;
    Py_DECREF(b);
    if (b == Py_None) {         /* res owns its memory: it is the storage's root array */
        if ((st = Storage->tp_alloc(Storage, 0)) == NULL)
            return NULL;
        *(PyObject **)((char *)st + storage_off[ST_ARRAY]) = Py_NewRef(res);
        *(PyObject **)((char *)st + storage_off[ST_VERSION]) = Py_NewRef(zero);
        *(PyObject **)((char *)st + storage_off[ST_DEVICE]) = Py_NewRef(CPU);
    }
    else {
        PyObject *cargs[2] = {res, CPU};
        if ((st = PyObject_Vectorcall((PyObject *)Storage, cargs, 2, NULL)) == NULL)
            return NULL;
    }
    Py_XSETREF(TB(out)->storage, st);     /* (steals st) */
    if ((al = tensor_new(Tensor, res, odt)) != NULL)
        Py_XSETREF(TB(al)->storage, Py_NewRef(st));
    return al;
}

/* TensorMeta(t) as graph makes it: the tuple (shape, dt, CPU) of a cpu tensor of dtype dt
 * (the fast path checked both) whose array has that shape; steals shape; new ref */
static PyObject *meta_of(PyTypeObject *type, PyObject *shape, PyObject *dt)
{
    PyObject *m = shape != NULL ? type->tp_alloc(type, 3) : NULL;
    if (m == NULL) {
        Py_XDECREF(shape);
        return NULL;
    }
    PyTuple_SET_ITEM(m, 0, shape);
    PyTuple_SET_ITEM(m, 1, Py_NewRef(dt));
    PyTuple_SET_ITEM(m, 2, Py_NewRef(CPU));
    return m;
}

/* the (node, output_nr) Tensor t's gradient flows into, as simple_node finds it; new ref */
static PyObject *edge(PyObject *t)
{
    PyObject *fn = TF(t, grad_fn, Py_None), *rv, *acc, *r;
    if (TF(t, base, Py_None) != Py_None)
        return PyObject_CallOneArg(edge_of, t);
    if (fn != Py_None)
        return PyTuple_Pack(2, fn, TF(t, output_nr, zero));
    rv = TF(t, requires_grad, Py_False);
    int rg = rv == Py_True ? 1 : rv == Py_False ? 0 : PyObject_IsTrue(rv);
    if (rg <= 0)
        return rg < 0 ? NULL : Py_NewRef(no_edge);
    acc = TF(t, grad_acc, Py_None);         /* a leaf: its accumulator, made on first use */
    /* the edge made for it last time, while the accumulator is the same (not an edge tuple
     * made and freed per leaf per op) */
    PyObject *e = TB(t)->leaf_edge;
    if (acc != Py_None && e != NULL && PyTuple_CheckExact(e) && PyTuple_GET_SIZE(e) == 2 &&
        PyTuple_GET_ITEM(e, 0) == acc)
        return Py_NewRef(e);
    acc = acc != Py_None ? Py_NewRef(acc) : PyObject_CallMethodNoArgs(t, s_grad_accumulator);
    if (acc == NULL)
        return NULL;
    r = PyTuple_Pack(2, acc, zero);
    Py_DECREF(acc);
    if (r != NULL)
        Py_XSETREF(TB(t)->leaf_edge, Py_NewRef(r));
    return r;
}

/* t._version: the Tensor property's body for a Tensor (the storage's slot when it is a plain
 * UntypedStorage); new ref */
static PyObject *version_of(PyObject *t)
{
    if (!PyObject_TypeCheck(t, Tensor))
        return GET(t, s_version);
    PyObject *st = TF(t, storage, Py_None), *v;
    if (st == Py_None)
        return Py_NewRef(zero);
    if (Py_TYPE(st) == Storage && (v = *(PyObject **)((char *)st + storage_off[ST_VERSION])))
        return Py_NewRef(v);
    return GET(st, s_version);
}

/* graph._saved_is_read: saved argument i feeds a gradient that will be computed */
static int is_read(PyObject *needed_by, Py_ssize_t i, PyObject *args)
{
    PyObject *key = PyLong_FromSsize_t(i), *users;
    if (key == NULL)
        return -1;
    users = PyDict_GetItemWithError(needed_by, key);
    Py_DECREF(key);
    if (users == NULL)
        return PyErr_Occurred() ? -1 : 1;
    PyObject *seq = PySequence_Fast(users, "needed_by");
    if (seq == NULL)
        return -1;
    int r = 0;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq) && !r; k++) {
        Py_ssize_t j = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, k));
        if (j == -1 && PyErr_Occurred()) {
            r = -1;
            break;
        }
        if (j < PyTuple_GET_SIZE(args)) {
            PyObject *v, *a = PyTuple_GET_ITEM(args, j);
            if (PyObject_TypeCheck(a, Tensor)) {
                v = TF(a, requires_grad, Py_False);
                r = v == Py_True ? 1 : PyObject_IsTrue(v);
                if (r < 0)
                    break;
                continue;
            }
            if (_PyObject_LookupAttr(a, s_requires_grad, &v) < 0) {
                r = -1;
                break;
            }
            if (v != NULL) {
                r = PyObject_IsTrue(v);
                Py_DECREF(v);
            }
        }
    }
    Py_DECREF(seq);
    return r;
}

/* whether the tuple or list seq holds the int i (OpDef.save, OpDef.promote_args) */
static int seq_has(PyObject *seq, Py_ssize_t i)
{
    PyObject *const *items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++)
        if (PyLong_CheckExact(items[k]) && PyLong_AsSsize_t(items[k]) == i)
            return 1;
    return 0;
}

/* datas: the tensors' arrays; dt their dtype, or NULL where each has its own; res, odt: the
 * output's array and dtype */
static PyObject *record_node(PyObject *opdef, PyObject *args, PyObject *tensors, PyObject *pos,
                             PyObject *out, PyObject *dt, PyObject *const *datas, PyObject *res,
                             PyObject *odt)
{
    int r = ANOMALY_ENABLED();
    if (r < 0)
        return NULL;
    if (r || PyList_GET_SIZE(saved_hooks)) {
        PyObject *cargs[5] = {opdef, args, tensors, pos, out};
        return PyObject_Vectorcall(simple_node, cargs, 5, NULL);
    }
    Py_ssize_t nt = PyTuple_GET_SIZE(tensors), na = PyTuple_GET_SIZE(args);
    PyObject *save = NULL, *needed_by = NULL, *sr = NULL, *ret = NULL, *node = NULL;
    /* the op's node class, or a function of the arguments giving it (graph.simple_type) */
    PyObject *tp = OP(opdef, OP_SIMPLE_TYPE);
    if (tp != NULL && !PyType_Check(tp))
        Py_SETREF(tp, PyObject_Call(tp, args, NULL));
    if (tp != NULL && PyType_Check(tp) && ((PyTypeObject *)tp)->tp_base == SimpleNode)
        node = ((PyTypeObject *)tp)->tp_alloc((PyTypeObject *)tp, 0);
    else if (tp != NULL)
        PyErr_SetString(PyExc_TypeError, "OpDef.simple_type: not a SimpleNode class");
    Py_XDECREF(tp);
    if (node == NULL)
        return NULL;
    PyObject *edges = SLOT(node, N_NEXT) = PyTuple_New(nt);
    PyObject *metas = SLOT(node, N_META) = PyList_New(nt);
    if (edges == NULL || metas == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < nt; k++) {
        PyObject *t = PyTuple_GET_ITEM(tensors, k), *e, *m;
        if ((e = edge(t)) == NULL)
            goto done;
        PyTuple_SET_ITEM(edges, k, e);
        PyObject *shape = ND(datas[k], ND_SHAPE, s_shape), *tdt = dt ? dt : TB(t)->dtype;
        if (shape == NULL)
            goto done;
        /* a second input of the first one's shape and dtype shares its (immutable) meta */
        PyObject *m0 = k > 0 ? PyList_GET_ITEM(metas, 0) : NULL;
        if (m0 != NULL && PyTuple_GET_ITEM(m0, 1) == tdt &&
            (r = PyObject_RichCompareBool(shape, PyTuple_GET_ITEM(m0, 0), Py_EQ)) != 0) {
            Py_DECREF(shape);
            if (r < 0)
                goto done;
            m = Py_NewRef(m0);
        }
        else if ((m = meta_of((PyTypeObject *)meta_type, shape, tdt)) == NULL)
            goto done;
        PyList_SET_ITEM(metas, k, m);
    }
    /* after the edges: a view's refresh (edge_of) records nodes */
    if ((SLOT(node, N_SEQ) = PyIter_Next(seq_iter)) == NULL)
        goto done;
    SLOT(node, N_OPDEF) = Py_NewRef(opdef);
    SLOT(node, N_KWARGS) = Py_NewRef(no_kwargs);
    SLOT(node, N_POS) = Py_NewRef(pos);
    SLOT(node, N_RELEASED) = Py_NewRef(Py_False);
    if ((save = OP(opdef, OP_SAVE)) == NULL || (sr = OP(opdef, OP_SAVE_RESULT)) == NULL)
        goto done;
    if (!PyTuple_Check(save)) {
        PyErr_SetString(PyExc_TypeError, "OpDef.save must be a tuple");
        goto done;
    }
    int save_result = PyObject_IsTrue(sr), has = save_result;
    if (save_result < 0)
        goto done;
    PyObject *saved = SLOT(node, N_ARGS) = PyList_New(na);
    if (saved == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < na; i++)
        PyList_SET_ITEM(saved, i, Py_NewRef(PyTuple_GET_ITEM(args, i)));
    Py_ssize_t ns = PyTuple_GET_SIZE(save);
    PyObject *versions = SLOT(node, N_VERSIONS) = ns ? PyList_New(0) : Py_NewRef(empty_tuple);
    if (versions == NULL)
        goto done;
    if (ns && (needed_by = OP(opdef, OP_NEEDED_BY)) == NULL)
        goto done;
    if (ns && !PyDict_Check(needed_by)) {
        PyErr_SetString(PyExc_TypeError, "OpDef.needed_by must be a dict");
        goto done;
    }
    /* (needed_by's -1: the output, saved only when a gradient that reads it is computed) */
    if (save_result && ns && PyDict_GET_SIZE(needed_by) &&
            (has = save_result = is_read(needed_by, -1, args)) < 0)
        goto done;
    for (Py_ssize_t k = 0; k < nt; k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(PyTuple_GET_ITEM(pos, k), 0));
        if (ns && seq_has(save, i)) {
            /* (an argument no computed gradient reads is kept, but not version-checked) */
            if ((r = PyDict_GET_SIZE(needed_by) ? is_read(needed_by, i, args) : 1) < 0)
                goto done;
            if (r) {
                PyObject *t = PyTuple_GET_ITEM(tensors, k), *v = version_of(t), *tv;
                if (v == NULL)
                    goto done;
                tv = PyTuple_Pack(2, t, v);
                Py_DECREF(v);
                if (tv == NULL || PyList_Append(versions, tv) < 0) {
                    Py_XDECREF(tv);
                    goto done;
                }
                Py_DECREF(tv);
                has = 1;
            }
        }
        /* backward sees only the metadata of what it did not save */
        else if (PyList_SetItem(saved, i, Py_NewRef(PyList_GET_ITEM(metas, k))) < 0)
            goto done;
    }
    /* NOTE (as simple_node): a saved Python scalar counts as saved */
    for (Py_ssize_t j = 0; !has && j < ns; j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(save, j));
        if (i == -1 && PyErr_Occurred())
            goto done;
        if (i < na && (r = PyDict_GET_SIZE(needed_by) ? is_read(needed_by, i, args) : 1) != 0) {
            if (r < 0)
                goto done;
            has = 1;
        }
    }
    SLOT(node, N_HAS_SAVED) = PyBool_FromLong(has);
    {
        /* simple_node's _outs; an input's equal shape tuple, or its whole meta, is shared */
        PyObject *shape = ND(res, ND_SHAPE, s_shape), *m0 = PyList_GET_ITEM(metas, 0), *outs;
        if (shape == NULL)
            goto done;
        if ((r = PyObject_RichCompareBool(shape, PyTuple_GET_ITEM(m0, 0), Py_EQ)) != 0) {
            Py_SETREF(shape, Py_NewRef(PyTuple_GET_ITEM(m0, 0)));
            if (r < 0) {
                Py_DECREF(shape);
                goto done;
            }
        }
        /* (graph reads _outs as (shape, dtype, device) triples: a TensorMeta is one) */
        PyObject *m = shape == PyTuple_GET_ITEM(m0, 0) && odt == PyTuple_GET_ITEM(m0, 1) ?
            (Py_DECREF(shape), Py_NewRef(m0)) : meta_of(&PyTuple_Type, shape, odt);
        outs = m == NULL ? NULL : PyTuple_Pack(1, m);
        Py_XDECREF(m);
        if ((SLOT(node, N_OUTS) = outs) == NULL)
            goto done;
    }
    if (save_result) {
        PyObject *al = saved_output(out, res, odt);
        if (al == NULL)
            goto done;
        /* (a new storage's version: 0) */
        SLOT(node, N_RESULTS) = Py_BuildValue("[(OO)]", al, zero);
        Py_DECREF(al);
        if (SLOT(node, N_RESULTS) == NULL)
            goto done;
    }
    else
        SLOT(node, N_RESULTS) = Py_NewRef(Py_None);
    ret = Py_NewRef(node);
done:
    Py_DECREF(node);
    Py_XDECREF(save);
    Py_XDECREF(sr);
    Py_XDECREF(needed_by);
    return ret;
}


/* simple_node(opdef, args, tensors, positions, out): graph.simple_node for dispatch.py's quick
 * paths (cpu tensors, each an argument of its own, of any dtypes; a plain output). The Python
 * function runs where this does not apply: an op that saves its result (the output may
 * already be a view with a storage), or a tensor without its fields set. */
static PyObject *simple_node_c(PyObject *self, PyObject *const *av, Py_ssize_t n)
{
    if (n != 5)
        return PyErr_Format(PyExc_TypeError, "simple_node: 5 arguments, got %zd", n);
    PyObject *opdef = av[0], *args = av[1], *pos = av[3], *out = av[4], *ret = NULL;
    PyObject *tensors = PySequence_Tuple(av[2]), *sr = OP(opdef, OP_SAVE_RESULT);
    if (tensors == NULL || sr == NULL)
        goto done;
    Py_ssize_t nt = PyTuple_GET_SIZE(tensors);
    int plain = sr == Py_False && nt > 0 && nt <= 8 && PyTuple_CheckExact(args) &&
        PyTuple_CheckExact(pos) && PyTuple_GET_SIZE(pos) == nt &&
        PyObject_TypeCheck(out, Tensor) && TB(out)->data != NULL && TB(out)->dtype != NULL;
    PyObject *datas[8];
    for (Py_ssize_t k = 0; plain && k < nt; k++) {
        PyObject *t = PyTuple_GET_ITEM(tensors, k);
        plain = PyObject_TypeCheck(t, Tensor) && TB(t)->data != NULL && TB(t)->dtype != NULL;
        if (plain)
            datas[k] = TB(t)->data;
    }
    if (!plain) {
        PyObject *cargs[5] = {opdef, args, tensors, pos, out};
        ret = PyObject_Vectorcall(simple_node, cargs, 5, NULL);
        goto done;
    }
    ret = record_node(opdef, args, tensors, pos, out, NULL, datas, TB(out)->data,
                      TB(out)->dtype);
done:
    Py_XDECREF(tensors);
    Py_XDECREF(sr);
    return ret;
}
