/* In-place ops (``x.add_(y)``, ``x.mul_(0.5)``, ``x.zero_()``, ``x.copy_(y)``...):
 * dispatch.dispatch_inplace's common call in C (included by _dispatch.c). dispatch_inplace is
 * the reference; this takes a call only where none of its autograd work applies: grad mode
 * off, or nothing involved requiring grad (so no leaf or view checks, no saved copy of self,
 * no history to rebase), no hooks, a plain cpu tensor written, no expanded view. Then:
 *
 * - an op with a NumPy ufunc (OpDef.ufunc: one operand at most, a number or a tensor of
 *   self's dtype) or an OpDef.into (fill_, copy_, index_put_, clamp_: tensors, index tuples,
 *   numbers and options; a float tensor of self's dtype) writes straight into self's float
 *   array (``ufunc(x, y, out=x)``, ``into(x, x, *rest)``): no result array, no copy back;
 * - any other op takes the fast or several-tensors path and its result, of self's dtype and
 *   shape, is copied into self.
 *
 * Options given by name are moved into their places first (dispatch._positional).
 * Either way self's version is bumped. Anything else, or a write NumPy refuses (a shape that
 * does not broadcast into self, a read-only array: nothing is written then), goes to the
 * Python reference, which words torch's errors. */

static PyObject *py_dispatch_inplace, *kw_out, *one;

/* 1 when the call records nothing: grad mode off, or neither self, its base nor a tensor
 * argument requires grad; 0 when one does, -1 on error */
static int records_nothing(PyObject *self, PyObject *args)
{
    int r = GRAD_ENABLED();
    if (r <= 0)
        return r < 0 ? -1 : 1;
    PyObject *base = TF(self, base, Py_None);
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    for (Py_ssize_t i = -2; i < n; i++) {
        PyObject *t = i == -2 ? self : i == -1 ? base : PyTuple_GET_ITEM(args, i);
        if (!PyObject_TypeCheck(t, Tensor))
            continue;
        PyObject *v = TF(t, requires_grad, Py_False);
        if (v != Py_False && (r = PyObject_IsTrue(v)) != 0)
            return r < 0 ? -1 : 0;
    }
    return 1;
}

/* 1 when array x has a stride of 0 (an expanded view: dispatch_inplace's overlap check), 0 if
 * not, -1 on error */
static int has_zero_stride(PyObject *x)
{
    PyObject *st = PyObject_GetAttrString(x, "strides");
    if (st == NULL)
        return -1;
    int found = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(st) && !found; i++)
        found = PyLong_AsSsize_t(PyTuple_GET_ITEM(st, i)) == 0;
    Py_DECREF(st);
    return found;
}

/* a tensor operand's array where the in-place write can take it (a cpu tensor held in an
 * ndarray; a float one of self's dtype dt, as the fast path's one dtype), borrowed; NULL
 * where it cannot */
static PyObject *operand_array(PyObject *t, PyObject *dt)
{
    PyObject *d = TB(t)->data;
    if (TF(t, device, CPU) != CPU || d == NULL || Py_TYPE(d) != (PyTypeObject *)ndarray ||
        TB(t)->dtype == NULL)
        return NULL;
    if (TB(t)->dtype != dt) {
        long cat = category_of(TB(t)->dtype);
        if (cat < 0 || cat >= FLOAT) {
            PyErr_Clear();
            return NULL;
        }
    }
    return d;
}

/* what into(out, *operands) gets for an argument: a tensor's array, a tuple of the arrays of
 * a tuple or list of tensors (index_put_'s indices), a number or option as it is; new ref,
 * NULL (no error set) where the write cannot take it */
static PyObject *into_operand(PyObject *a, PyObject *dt)
{
    if (PyObject_TypeCheck(a, Tensor)) {
        PyObject *d = operand_array(a, dt);
        return d ? Py_NewRef(d) : NULL;
    }
    if ((PyTuple_CheckExact(a) || PyList_CheckExact(a)) && PySequence_Fast_GET_SIZE(a) &&
        PyObject_TypeCheck(PySequence_Fast_ITEMS(a)[0], Tensor)) {
        Py_ssize_t k = PySequence_Fast_GET_SIZE(a);
        PyObject *out = PyTuple_New(k);
        for (Py_ssize_t j = 0; out != NULL && j < k; j++) {
            PyObject *t = PySequence_Fast_ITEMS(a)[j];
            PyObject *d = PyObject_TypeCheck(t, Tensor) ? operand_array(t, dt) : NULL;
            if (d == NULL)
                Py_CLEAR(out);
            else
                PyTuple_SET_ITEM(out, j, Py_NewRef(d));
        }
        return out;
    }
    return is_option(a) ? Py_NewRef(a) : NULL;
}

/* the op's value written straight into x by its ufunc (``ufunc(x, y, out=x)``: one operand at
 * most, a number or a tensor of self's dtype) or else its into (``into(x, x, *operands)``:
 * add_'s with alpha, addcmul_'s): 1 done, 0 not this route, -2 NumPy refused (nothing
 * written), -1 error. dt: self's dtype, a float (not complex) one that a Python number keeps */
static int write_into(PyObject *opdef, PyObject *x, PyObject *dt, PyObject *args)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *f, *res = NULL, *cargs[9] = {x, x}, *y = n == 1 ? PyTuple_GET_ITEM(args, 0) : NULL;
    if ((f = OP(opdef, OP_UFUNC)) == NULL)
        return -1;
    if (y != NULL && PyObject_TypeCheck(y, Tensor))
        y = TB(y)->dtype == dt ? operand_array(y, dt) : NULL;
    else if (y != NULL && !PyFloat_CheckExact(y) && !PyLong_CheckExact(y))
        y = NULL;
    if (f != Py_None && (n > 1 || (n == 1 && y == NULL)))
        Py_SETREF(f, Py_NewRef(Py_None));       /* not the ufunc's call: the into's, if any */
    if (f != Py_None) {
        PyObject *uargs[3] = {x, n ? y : x, x};
        res = call_ufunc(f, uargs, n + 1, kw_out);
    }
    else {
        Py_DECREF(f);
        if ((f = OP(opdef, OP_INTO)) == NULL)
            return -1;
        Py_ssize_t i = 0;
        for (; f != Py_None && i < n; i++)
            if ((cargs[i + 2] = into_operand(PyTuple_GET_ITEM(args, i), dt)) == NULL)
                break;
        if (f != Py_None && i == n)
            res = PyObject_Vectorcall(f, cargs, n + 2, NULL);
        for (Py_ssize_t j = 0; j < i; j++)
            Py_DECREF(cargs[j + 2]);
        if (f == Py_None || i < n) {
            Py_DECREF(f);
            return PyErr_Occurred() ? -1 : 0;
        }
    }
    Py_DECREF(f);
    if (res == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();
        return -2;
    }
    Py_DECREF(res);
    return 1;
}

/* the fast path's result copied into x: 1 done, 0/-2 not taken (the caller goes to Python),
 * -1 error (raised as the Python dispatch raises it) */
static int result_into(PyObject *opdef, PyObject *self, PyObject *x, PyObject *args)
{
    PyObject *full = prepend(self, args), *out;
    if (full == NULL)
        return -1;
    int handled, r = 0;
    out = fast(opdef, &PyTuple_GET_ITEM(full, 0), PyTuple_GET_SIZE(full), full, empty_dict,
               &handled);
    if (handled < 0)        /* (several tensors: addcmul_, lerp_) */
        out = several_path(opdef, full, empty_dict, &handled);
    Py_DECREF(full);
    if (handled != 1)
        return 0;
    if (out == NULL)
        return -1;
    PyObject *od = TB(out)->data, *xs = NULL, *os = NULL;
    if (TB(out)->dtype == TB(self)->dtype && od != NULL &&
        Py_TYPE(od) == (PyTypeObject *)ndarray && (xs = ND(x, ND_SHAPE, s_shape)) != NULL &&
        (os = ND(od, ND_SHAPE, s_shape)) != NULL &&
        (r = PyObject_RichCompareBool(xs, os, Py_EQ)) == 1)
        r = PyObject_SetItem(x, Py_Ellipsis, od) < 0 ? -1 : 1;
    if (r < 0 && PyErr_Occurred() && (PyErr_ExceptionMatches(PyExc_ValueError) ||
                                      PyErr_ExceptionMatches(PyExc_TypeError))) {
        PyErr_Clear();
        r = -2;
    }
    Py_XDECREF(xs);
    Py_XDECREF(os);
    Py_DECREF(out);
    return r;
}

/* self's storage version += 1 (Tensor._bump_version); 0 or -1 */
static int bump_version(PyObject *self)
{
    PyObject *st = TF(self, storage, Py_None), *v, *v1;
    st = st != Py_None ? Py_NewRef(st) : PyObject_CallMethodNoArgs(self, s_get_storage);
    if (st == NULL)
        return -1;
    int r = -1;
    if ((v = PyObject_GetAttr(st, s_version)) != NULL) {
        if ((v1 = PyNumber_Add(v, one)) != NULL) {
            r = PyObject_SetAttr(st, s_version, v1);
            Py_DECREF(v1);
        }
        Py_DECREF(v);
    }
    Py_DECREF(st);
    return r;
}

/* dispatch_inplace's work on positional args: self, new ref; NULL on error; None (new ref)
 * where the Python reference takes the call */
static PyObject *inplace_call(PyObject *opdef, PyObject *self, PyObject *args, PyObject *x,
                              PyObject *dt)
{
    PyObject *names[5] = {s_autocast, s_tracer, s_profiler, s_transform, s_override};
    int r = hooks_off(hooks, names, 5);
    if (r > 0)
        r = records_nothing(self, args);
    if (r > 0 && TF(self, base, Py_None) != Py_None) {
        int w = op_truth(opdef, OP_WRITES_OVERLAP);
        r = w < 0 ? -1 : w ? 1 : (w = has_zero_stride(x)) < 0 ? -1 : !w;
    }
    if (r <= 0)
        return r < 0 ? NULL : Py_NewRef(Py_None);
    Py_INCREF(x);           /* (self's _data stays ours while NumPy runs) */
    Py_INCREF(dt);
    r = 0;
    if (scalar_keeps_dtype(dt)) {
        long cat = category_of(dt);
        r = cat < 0 ? -1 : cat == FLOAT ? write_into(opdef, x, dt, args) : 0;
    }
    if (r == 0)
        r = result_into(opdef, self, x, args);
    Py_DECREF(x);
    Py_DECREF(dt);
    if (r == 1)
        return bump_version(self) < 0 ? NULL : Py_NewRef(self);
    return r == -1 ? NULL : Py_NewRef(Py_None);
}

/* dispatch_inplace(opdef, self, args, kwargs): self.<op>_(*args, **kwargs); a self_at
 * (polygamma_) goes to the reference as it is */
static PyObject *dispatch_inplace(PyObject *mod, PyObject *const *av, Py_ssize_t n,
                                  PyObject *kwnames)
{
    if (n != 4 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)))
        return PyObject_Vectorcall(py_dispatch_inplace, av, n, kwnames);
    PyObject *opdef = av[0], *self = av[1], *args = av[2], *kwargs = av[3], *x, *dt;
    PyObject *moved = NULL, *ret;
    if (!ready || !fast_on || !PyTuple_CheckExact(args) || PyTuple_GET_SIZE(args) > 7 ||
        (kwargs != Py_None && !PyDict_Check(kwargs)) || !PyObject_TypeCheck(self, Tensor) ||
        TF(self, device, CPU) != CPU || (x = TB(self)->data) == NULL ||
        Py_TYPE(x) != (PyTypeObject *)ndarray || (dt = TB(self)->dtype) == NULL)
        goto slow;
    if (kwargs != Py_None && PyDict_GET_SIZE(kwargs)) {
        /* options by name moved into their places (dispatch._positional), as dispatch does */
        PyObject *given = prepend(self, args), *full;
        if (given == NULL)
            return NULL;
        full = positional_of(opdef, given, kwargs);
        Py_DECREF(given);
        if (full == NULL)
            return NULL;
        if (!PyTuple_CheckExact(full) || PyTuple_GET_SIZE(full) > 8) {
            Py_DECREF(full);
            goto slow;
        }
        moved = PyTuple_GetSlice(full, 1, PyTuple_GET_SIZE(full));
        Py_DECREF(full);
        if (moved == NULL)
            return NULL;
        args = moved;
    }
    ret = inplace_call(opdef, self, args, x, dt);
    Py_XDECREF(moved);
    if (ret != Py_None)
        return ret;
    Py_DECREF(ret);
slow:
    return PyObject_Vectorcall(py_dispatch_inplace, av, 4, kwnames);
}
