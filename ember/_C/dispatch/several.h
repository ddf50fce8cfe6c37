/* dispatch.py's _tensors in C (included by _dispatch.c; that function is the reference):
 * several cpu tensors among plain options (``linear(x, w, b)``, ``where(c, x, y)``,
 * ``embedding(w, idx)``, ``index_put(x, [i, j], v)``'s list of index tensors), where promotion
 * has nothing to do. The fast path hands it the calls
 * the Python dispatch hands to _tensors; what it declines goes to the Python dispatch. */

/* an option the quick paths pass as it is (dispatch._option): None, a bool, an exact int or
 * float, a string, an ember dtype, a tuple or list of exact ints */
static int is_option(PyObject *o)
{
    if (o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) ||
        PyUnicode_CheckExact(o) || Py_TYPE(o) == dtype_type)
        return 1;
    if (!PyTuple_CheckExact(o) && !PyList_CheckExact(o))
        return 0;
    PyObject *const *items = PySequence_Fast_ITEMS(o);
    for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(o); j++)
        if (!PyLong_CheckExact(items[j]))
            return 0;
    return 1;
}

#define SEVERAL_MAX 12

static int records(PyObject *opdef, PyObject *tensors);

/* _tensors(opdef, args, kwargs): kwargs empty_dict, or keyword-only plain options (baddbmm's
 * beta, scatter_reduce's include_self), with which, as there, _finish wraps and records;
 * *handled = 0: declined */
static PyObject *several_path(PyObject *opdef, PyObject *args, PyObject *kwargs, int *handled)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args), nt = 0, pos = 0;
    PyObject *key, *value;
    int kw = PyDict_GET_SIZE(kwargs) != 0;
    PyObject *promoted = NULL, *dt = NULL, *arrays[SEVERAL_MAX + 1], *ts[SEVERAL_MAX];
    PyObject *tensors = NULL, *positions = NULL, *res = NULL, *out = NULL, *ret = NULL;
    PyObject *lists[SEVERAL_MAX];   /* (owned: the arrays of lists of tensors) */
    Py_ssize_t where[SEVERAL_MAX], nl = 0;
    *handled = 0;
    if (n > SEVERAL_MAX)
        return NULL;
    while (PyDict_Next(kwargs, &pos, &key, &value))     /* (dispatch's test for _tensors) */
        if (!is_option(value) || PyUnicode_CompareWithASCIIString(key, "out") == 0)
            return NULL;
    PyObject *p = OP(opdef, OP_PROMOTE);
    if (p == NULL)
        return *handled = 1, NULL;
    int promotes = p != Py_None;
    Py_DECREF(p);
    if (promotes) {
        if ((promoted = OP(opdef, OP_PROMOTE_ARGS)) == NULL)
            return *handled = 1, NULL;
        if (!PyTuple_CheckExact(promoted) && !PyList_CheckExact(promoted))
            goto done;      /* (declined: the reference reads it) */
    }
    arrays[0] = np;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        arrays[i + 1] = a;
        if (PyObject_TypeCheck(a, Tensor)) {
            PyObject *adt = TB(a)->dtype;
            if (TF(a, device, CPU) != CPU || adt == NULL || TB(a)->data == NULL ||
                adt == opmath[0] || adt == opmath[1])
                goto done;
            if (promoted != NULL && seq_has(promoted, i)) {
                if (dt != NULL && adt != dt)
                    goto done;
                dt = adt;
            }
            ts[nt] = a;
            where[nt++] = i;
            arrays[i + 1] = TB(a)->data;
        }
        else if ((PyList_CheckExact(a) || PyTuple_CheckExact(a)) && !promotes &&
                 PySequence_Fast_GET_SIZE(a) &&
                 PyObject_TypeCheck(PySequence_Fast_ITEMS(a)[0], Tensor)) {
            /* (index_put's indices: a list of their arrays; _finish records, as there) */
            Py_ssize_t m = PySequence_Fast_GET_SIZE(a);
            if (nt + m > SEVERAL_MAX)
                goto done;
            if ((lists[nl] = PyList_New(m)) == NULL)
                return *handled = 1, NULL;
            arrays[i + 1] = lists[nl++];
            for (Py_ssize_t j = 0; j < m; j++) {
                PyObject *t = PySequence_Fast_ITEMS(a)[j];
                if (!PyObject_TypeCheck(t, Tensor) || TF(t, device, CPU) != CPU ||
                    TB(t)->data == NULL)
                    goto done;
                PyList_SET_ITEM(arrays[i + 1], j, Py_NewRef(TB(t)->data));
                ts[nt] = t;
                where[nt++] = i;
            }
        }
        else if (!is_option(a) && !(Py_TYPE(a) == (PyTypeObject *)ndarray && !promotes))
            goto done;          /* (an index array, as x[idx] passes it, where nothing promotes) */
    }
    if (nt == 0 || (dt != NULL && !scalar_keeps_dtype(dt)))
        goto done;
    *handled = 1;
    if ((tensors = PyTuple_New(nt)) == NULL || (positions = PyTuple_New(nt)) == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < nt; k++) {
        PyObject *pos = Py_BuildValue("(nO)", where[k], Py_None);
        if (pos == NULL)
            goto done;
        PyTuple_SET_ITEM(positions, k, pos);
        PyTuple_SET_ITEM(tensors, k, Py_NewRef(ts[k]));
    }
    PyObject *fwd = OP(opdef, OP_FWD);
    if (fwd == NULL)
        goto done;
    if (kw) {
        PyObject *t = PyTuple_New(n + 1);
        for (Py_ssize_t i = 0; t != NULL && i <= n; i++)
            PyTuple_SET_ITEM(t, i, Py_NewRef(arrays[i]));
        res = t ? PyObject_Call(fwd, t, kwargs) : NULL;
        Py_XDECREF(t);
    }
    else
        res = PyObject_Vectorcall(fwd, arrays, n + 1, NULL);
    Py_DECREF(fwd);
    if (res == NULL) {
        ret = fwd_failed(opdef, args, kwargs, tensors);
        goto done;
    }
    int rec = (kw || nl) && Py_TYPE(res) == (PyTypeObject *)ndarray ? records(opdef, tensors) : 0;
    if (rec < 0)
        goto done;
    if (rec || Py_TYPE(res) != (PyTypeObject *)ndarray) {   /* (options: _finish records) */
        ret = PyObject_CallFunction(finish, "OOOOOOO", opdef, args, kwargs, tensors, res, CPU,
                                    Py_None);
        goto done;
    }
    if ((out = wrap_like(res, TB(ts[0])->dtype)) == NULL)     /* (Tensor._wrap) */
        goto done;
    /* _graph_of_one: the first tensor that requires grad decides */
    int r = GRAD_ENABLED();
    if (r > 0)
        r = op_truth(opdef, OP_DIFF);
    if (r < 0)
        goto done;
    for (Py_ssize_t k = 0; r && k < nt; k++) {
        PyObject *v = TF(ts[k], requires_grad, Py_False);
        int rg = v == Py_True ? 1 : v == Py_False ? 0 : PyObject_IsTrue(v);
        if (rg < 0 || (rg && record_one(opdef, args, empty_dict, tensors, positions, out,
                                          NULL, NULL) < 0))
            goto done;
        if (rg)
            break;
    }
    ret = Py_NewRef(out);
done:
    while (nl)
        Py_DECREF(lists[--nl]);
    Py_XDECREF(promoted);
    Py_XDECREF(tensors);
    Py_XDECREF(positions);
    Py_XDECREF(res);
    Py_XDECREF(out);
    return ret;
}
