/* dispatch's fast path in C (ember/_ops/dispatch.py is the reference; docs/kernels.md).
 *
 * dispatch(opdef, args, kwargs) makes the same checks, the same opdef.fwd(np, x, y) call and
 * the same output Tensor as dispatch.py's Python fast path, and records autograd as
 * graph.simple_node does (record.h; _record for the general case). engine.h holds the backward
 * engine's plain loop (engine.run_backward is its reference). Options given by name are moved
 * into their places first, as dispatch does; plain keyword-only ones take several_path
 * (dispatch._tensors). Any call the fast path does not take (other keyword-only options,
 * hooks, lists, promotion, other devices) goes to the Python dispatch unchanged, so
 * there is one dispatch logic and this file only skips the interpreter on the common call.
 * The binary operator type below does the same for ``Tensor.__add__`` and friends.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>   /* PyMemberDef: dtype slot offsets */

/* Python objects handed over by init() (module lifetime: never freed) */
static PyTypeObject *Tensor;
static PyObject *CPU, *np, *ndarray, *np_generic, *np_asarray, *scalar_keeps, *grad_state,
    *hooks, *py_dispatch, *finish, *record, *simple_node, *explain, *sparse_operand,
    *sparse_dispatch, *AT0, *AT1, *AT01, *dtype_of, *operands, *not_operand, *empty_dict,
    *empty_tuple, *common;
static long FLOAT;
static int ready;
/* 0 inside dispatch.python_reference(): every call goes to the Python dispatch, so one process
 * can run the same call both ways (tests/test_dispatch_equivalence.py) */
static int fast_on = 1;


static PyObject *s_view, *s_autocast, *s_tracer, *s_profiler, *s_transform, *s_override,
    *s_dtype, *s_device,
    *s_data, *s_category, *s_promote, *s_fwd, *s_np, *s_grad_enabled, *s_differentiable,
    *s_requires_grad, *s_vjp_fn, *s_nondiff_outputs, *s_grad_fn, *s_ufunc, *s_multi_output,
    *s_get_storage, *s_promote_args, *s_writes_overlap,
    *s_into, *s_params, *s_defaults, *s_simple_type;
static PyObject *view_outputs, *root_fn, *opmath[2];

static PyTypeObject *dtype_type;            /* ember's dtype: __slots__, read by offset */
static Py_ssize_t off_category, off_np;

#define GET(o, s) PyObject_GetAttr((o), (s))

/* an ndarray's attributes (shape, dtype, base: getset descriptors) read by calling the
 * descriptor found at init for an exact numpy.ndarray, without getattr's type lookup */
enum {ND_SHAPE, ND_DTYPE, ND_BASE, ND_STRIDES, ND_N};
static const char *nd_names[ND_N] = {"shape", "dtype", "base", "strides"};
static PyObject *nd_descr[ND_N];
static PyObject *ND(PyObject *a, int i, PyObject *name)
{
    PyObject *d = nd_descr[i];
    if (d != NULL && Py_TYPE(a) == (PyTypeObject *)ndarray)
        return Py_TYPE(d)->tp_descr_get(d, a, (PyObject *)Py_TYPE(a));
    return PyObject_GetAttr(a, name);
}

#include "tensor.h"     /* TensorBase: Tensor's fields by offset (TB, TF, TGET) */

/* An attribute of a long-lived object (an OpDef, the grad-mode state, the hooks class) read
 * from its __dict__ directly, skipping the type lookup; the classes involved define no data
 * descriptors of these names, so this is what getattr finds; a name missing there is read
 * from the class (a default), and anything else (a descriptor, a metaclass) from getattr.
 * New reference or NULL. */
static PyObject *ATTR(PyObject *o, PyObject *name)
{
    PyObject *d = PyType_Check(o) ? ((PyTypeObject *)o)->tp_dict : NULL;
    if (d == NULL) {
        PyObject **dp = _PyObject_GetDictPtr(o);
        d = dp != NULL ? *dp : NULL;
    }
    if (d != NULL) {
        PyObject *v = PyDict_GetItemWithError(d, name);
        if (v != NULL)
            return Py_NewRef(v);
        if (PyErr_Occurred())
            return NULL;
    }
    if (!PyType_Check(o)) {     /* a class default that is no descriptor: found as getattr would */
        PyObject *v = _PyType_Lookup(Py_TYPE(o), name);
        if (v != NULL && Py_TYPE(v)->tp_descr_get == NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(o, name);
}

/* a slot of an ember dtype (category, np); getattr for anything else */
static PyObject *dtype_slot(PyObject *dt, Py_ssize_t off, PyObject *name)
{
    if (Py_TYPE(dt) == dtype_type) {
        PyObject *v = *(PyObject **)((char *)dt + off);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(dt, name);
}

static int truth_attr(PyObject *o, PyObject *name)
{
    PyObject *v = ATTR(o, name);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

static int is_none_attr(PyObject *o, PyObject *name)
{
    PyObject *v = ATTR(o, name);
    if (v == NULL)
        return -1;
    int r = v == Py_None;
    Py_DECREF(v);
    return r;
}

#include "opattr.h"     /* OP(opdef, OP_...): an OpDef's attributes, cached */

static int scalar_keeps_dtype(PyObject *dt)
{
    Py_ssize_t n = PyTuple_GET_SIZE(scalar_keeps);
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyTuple_GET_ITEM(scalar_keeps, i) == dt)
            return 1;
    return 0;
}

static PyObject *int_bounds;    /* {integer dtype: (lowest, highest)} */

/* whether Python number s (an int or float) leaves dt as it is (promotion._int_keeps): dt one
 * that scalars keep, or an integer dtype and s an int in its range; 1, 0 or -1 */
static int number_keeps(PyObject *dt, PyObject *s)
{
    if (scalar_keeps_dtype(dt))
        return 1;
    PyObject *b = PyLong_CheckExact(s) ? PyDict_GetItemWithError(int_bounds, dt) : NULL;
    if (b == NULL)
        return PyErr_Occurred() ? -1 : 0;
    int r = PyObject_RichCompareBool(PyTuple_GET_ITEM(b, 0), s, Py_LE);
    return r == 1 ? PyObject_RichCompareBool(s, PyTuple_GET_ITEM(b, 1), Py_LE) : r;
}

/* dt.category (bool 0 ... complex 3); -1 on error */
static long category_of(PyObject *dt)
{
    PyObject *c = dtype_slot(dt, off_category, s_category);
    if (c == NULL)
        return -1;
    long v = PyLong_AsLong(c);
    Py_DECREF(c);
    return v;
}

/* dt.category < FLOAT; -1 on error */
static int below_float(PyObject *dt)
{
    long v = category_of(dt);
    return v < 0 ? -1 : v < FLOAT;
}

static PyObject *positional, *places, *tensor_list;

/* dispatch._positional: ``args`` with the options given by name in ``kwargs`` moved into their
 * places (defaults filling the gaps), new ref; None (new ref) where that is not plain (an
 * unknown or keyword-only name, one given twice, a gap without a default); NULL on error.
 * The op's places (dispatch._PLACES) are read here once the reference has made them. */
static PyObject *positional_of(PyObject *opdef, PyObject *args, PyObject *kwargs)
{
    PyObject *at = PyDict_GetItemWithError(places, opdef), *name, *value, *full = NULL;
    if (at == NULL)
        return PyErr_Occurred() ? NULL :
            PyObject_CallFunctionObjArgs(positional, opdef, args, kwargs, NULL);
    Py_ssize_t n = PyTuple_GET_SIZE(args), last = -1, pos = 0, i;
    while (PyDict_Next(kwargs, &pos, &name, &value)) {
        PyObject *where = PyDict_GetItemWithError(at, name);
        if (where == NULL && PyErr_Occurred())
            return NULL;
        if (where == NULL || (i = PyLong_AsSsize_t(where)) < n)
            return Py_NewRef(Py_None);
        last = i > last ? i : last;
    }
    PyObject *params = OP(opdef, OP_PARAMS), *defaults = params ? OP(opdef, OP_DEFAULTS) : NULL;
    if (defaults == NULL || (full = PyTuple_New(last + 1)) == NULL)
        goto done;
    for (i = 0; i < n; i++)
        PyTuple_SET_ITEM(full, i, Py_NewRef(PyTuple_GET_ITEM(args, i)));
    for (pos = 0; PyDict_Next(kwargs, &pos, &name, &value);)
        PyTuple_SET_ITEM(full, PyLong_AsSsize_t(PyDict_GetItem(at, name)), Py_NewRef(value));
    for (i = n; i < last; i++) {
        if (PyTuple_GET_ITEM(full, i) != NULL)
            continue;
        PyObject *d = PyTuple_Check(params) && i < PyTuple_GET_SIZE(params) && PyDict_Check(
            defaults) ? PyDict_GetItemWithError(defaults, PyTuple_GET_ITEM(params, i)) : NULL;
        if (d == NULL) {
            Py_SETREF(full, PyErr_Occurred() ? NULL : Py_NewRef(Py_None));
            break;
        }
        PyTuple_SET_ITEM(full, i, Py_NewRef(d));
    }
done:
    Py_XDECREF(params);
    Py_XDECREF(defaults);
    return full;
}

/* the forward refused the call with an error the Python dispatch raises in torch's words once
 * it runs the call again (ValueError, IndexError, TypeError, RuntimeError): cleared, 1; any
 * other error stays set, 0 */
static int refused(void)
{
    if (!PyErr_ExceptionMatches(PyExc_ValueError) && !PyErr_ExceptionMatches(PyExc_IndexError) &&
        !PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_RuntimeError))
        return 0;
    PyErr_Clear();
    return 1;
}

static PyObject *slow(PyObject *opdef, PyObject *args, PyObject *kwargs)
{
    return PyObject_CallFunctionObjArgs(py_dispatch, opdef, args, kwargs, NULL);
}

/* the forward raised: ValueError/IndexError/TypeError are explained (raise ... from None),
 * SparseOperand goes to the sparse rules, anything else propagates */
static PyObject *fwd_failed(PyObject *opdef, PyObject *args, PyObject *kwargs, PyObject *tensors)
{
    if (PyErr_ExceptionMatches(PyExc_ValueError) || PyErr_ExceptionMatches(PyExc_IndexError) ||
        PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_NormalizeException(&t, &v, &tb);
        if (tb != NULL)
            PyException_SetTraceback(v, tb);
        PyObject *e = PyObject_CallFunctionObjArgs(explain, opdef, tensors, v, NULL);
        Py_XDECREF(t);
        Py_XDECREF(tb);
        if (e == NULL) {
            Py_DECREF(v);
            return NULL;
        }
        PyException_SetCause(e, NULL);     /* "from None" (sets __suppress_context__) */
        PyException_SetContext(e, v);      /* steals v */
        PyErr_SetObject((PyObject *)Py_TYPE(e), e);
        Py_DECREF(e);
        return NULL;
    }
    if (PyErr_ExceptionMatches(sparse_operand)) {
        PyErr_Clear();
        return PyObject_CallFunctionObjArgs(sparse_dispatch, opdef, args, kwargs, NULL);
    }
    return NULL;
}

#include "record.h"     /* record_node: graph.simple_node */
#include "engine.h"     /* backward_loop: engine.run_backward's loop */

/* (first,) + rest (a tuple), new ref */
static PyObject *prepend(PyObject *first, PyObject *rest)
{
    Py_ssize_t n = PyTuple_GET_SIZE(rest);
    PyObject *t = PyTuple_New(n + 1);
    if (t == NULL)
        return NULL;
    PyTuple_SET_ITEM(t, 0, Py_NewRef(first));
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(t, i + 1, Py_NewRef(PyTuple_GET_ITEM(rest, i)));
    return t;
}

/* Tensor._wrap(res) for an output of dtype dt's kind: dt where res's NumPy dtype is dt's,
 * else dtype_of(res); new ref */
static PyObject *wrap_like(PyObject *res, PyObject *dt)
{
    PyObject *rd = ND(res, ND_DTYPE, s_dtype), *dnp = dtype_slot(dt, off_np, s_np), *odt, *out;
    int same = rd != NULL && rd == dnp;
    Py_XDECREF(rd);
    Py_XDECREF(dnp);
    if (rd == NULL || dnp == NULL)
        return NULL;
    if ((odt = same ? Py_NewRef(dt) : PyObject_CallOneArg(dtype_of, res)) == NULL)
        return NULL;
    out = tensor_new(Tensor, res, odt);
    Py_DECREF(odt);
    return out;
}

/* the graph of a fast or quick path's one output out, once one of its tensors requires grad
 * (dispatch._graph_of_one): the quick node, or _record where the op has no derivative or the
 * output is not float. datas: the tensors' arrays (dt their dtype, or NULL where each has
 * its own) for record_node straight away, as the fast path has them; NULL: simple_node_c
 * finds them (and takes the Python node where it must). 0, or -1 with an exception */
static int record_one(PyObject *opdef, PyObject *args, PyObject *kwargs, PyObject *tensors,
                      PyObject *positions, PyObject *out, PyObject *dt, PyObject *const *datas)
{
    int general = op_is_none(opdef, OP_VJP);
    if (general == 0 && (general = op_truth(opdef, OP_NONDIFF)) == 0)
        general = below_float(TB(out)->dtype);
    if (general < 0)
        return -1;
    if (general) {
        PyObject *outs = PyTuple_Pack(1, out), *v;
        v = outs ? PyObject_CallFunctionObjArgs(record, opdef, args, kwargs, tensors, outs,
                                                NULL) : NULL;
        Py_XDECREF(outs);
        Py_XDECREF(v);
        return v == NULL ? -1 : 0;
    }
    PyObject *nargs[5] = {opdef, args, tensors, positions, out}, *node;
    node = datas ? record_node(opdef, args, tensors, positions, out, dt, datas, TB(out)->data,
                               TB(out)->dtype) : simple_node_c(NULL, nargs, 5);
    if (node == NULL)
        return -1;
    Py_XSETREF(TB(out)->grad_fn, node);
    Py_XSETREF(TB(out)->requires_grad, Py_NewRef(Py_True));
    return 0;
}

#include "several.h"  /* several_path: dispatch._tensors; is_option */

/* av[1:] are options passed as they are (dispatch.py's _plain) */
static int plain_options(PyObject *const *av, Py_ssize_t n)
{
    for (Py_ssize_t i = 1; i < n; i++)
        if (!is_option(av[i]))
            return 0;
    return 1;
}

/* NumPy's error state (a context variable, NumPy 2) and its all-ignore value, or NULL */
static PyObject *np_errstate, *np_ignore;
/* this thread's context in which that variable is all-ignore (one per thread, kept) */
static _Thread_local PyObject *quiet_context;

/* ufunc f called under numpy.errstate(all="ignore"), as ember's Python forwards run under a
 * warnings filter (NOTE: torch computes log(0), 0/0 silently; NumPy warns, and a warning from
 * a ufunc called from C names the user's line, where no filter for ember's modules catches
 * it). The call runs in a context of its own, entered and left, which is cheaper than
 * setting and resetting the variable (numpy.errstate's way) in the caller's. A
 * ufunc on float arrays reads no other context variable and calls no Python code, so
 * nothing else sees that context. New ref or NULL */
static PyObject *call_ufunc(PyObject *f, PyObject *const *args, size_t n, PyObject *kwnames)
{
    PyObject *ctx = quiet_context, *res;
    if (np_errstate == NULL)
        return PyObject_Vectorcall(f, args, n, kwnames);
    if (ctx == NULL) {
        if ((ctx = PyContext_New()) == NULL)
            return NULL;
        PyObject *token = PyContext_Enter(ctx) < 0 ? NULL :
            PyContextVar_Set(np_errstate, np_ignore);
        if (token == NULL || PyContext_Exit(ctx) < 0) {
            Py_XDECREF(token);
            Py_DECREF(ctx);
            return NULL;
        }
        Py_DECREF(token);
        quiet_context = ctx;
    }
    if (PyContext_Enter(ctx) < 0) {     /* (entered already: not from here) */
        PyErr_Clear();
        return PyObject_Vectorcall(f, args, n, kwnames);
    }
    res = PyObject_Vectorcall(f, args, n, kwnames);
    PyObject *t = NULL, *v = NULL, *tb = NULL;
    if (res == NULL)
        PyErr_Fetch(&t, &v, &tb);
    if (PyContext_Exit(ctx) < 0) {
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
        Py_XDECREF(res);
        return NULL;
    }
    if (res == NULL)
        PyErr_Restore(t, v, tb);
    return res;
}

/* the op's forward on cargs[1:n+1] (cargs[0] is numpy): OpDef.ufunc called directly where the
 * op has one and the operands are floating or complex, else fwd(np, ...); new ref or NULL */
static PyObject *forward(PyObject *opdef, int floating, PyObject **cargs, Py_ssize_t n)
{
    PyObject *f = floating ? OP(opdef, OP_UFUNC) : Py_NewRef(Py_None), *res;
    if (f == NULL)
        return NULL;
    if (f == Py_None) {
        Py_DECREF(f);
        if ((f = OP(opdef, OP_FWD)) == NULL)
            return NULL;
        res = PyObject_Vectorcall(f, cargs, n + 1, NULL);
    }
    else
        res = call_ufunc(f, cargs + 1, n, NULL);
    Py_DECREF(f);
    return res;
}

/* whether a call on tensors records a graph: grad mode on, the op differentiable and a tensor
 * requiring grad (the first that does decides, as in dispatch.py); -1 with an exception */
static int records(PyObject *opdef, PyObject *tensors)
{
    int r = GRAD_ENABLED();
    if (r > 0 && (r = op_truth(opdef, OP_DIFF)) > 0)
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tensors); i++) {
            PyObject *v = TF(PyTuple_GET_ITEM(tensors, i), requires_grad, Py_False);
            if ((r = v == Py_True ? 1 : PyObject_IsTrue(v)) != 0)
                return r;
        }
    return r;   /* (the fast path's tensors are never empty: 0 here once all are read) */
}

/* the fast path proper; *handled = 0 means "not taken: run the Python dispatch" */
static PyObject *fast(PyObject *opdef, PyObject *const *av, Py_ssize_t n, PyObject *args,
                      PyObject *kwargs, int *handled)
{
    PyObject *a, *b = NULL, *x = NULL, *y = NULL, *dt = NULL, *tensors = NULL, *pos, *res = NULL;
    PyObject *out = NULL, *ret = NULL;
    int r;
    *handled = 1;
    if (n > 1 && PyObject_TypeCheck(av[0], Tensor) &&
        !(n == 2 && (PyObject_TypeCheck(av[1], Tensor) || PyLong_CheckExact(av[1]) ||
                     PyFloat_CheckExact(av[1])))) {
        /* a tensor and options (a dim, keepdim, a dtype): the forward, as below */
        a = av[0];
        if (TF(a, device, CPU) != CPU || n > 8)
            return *handled = 0, NULL;
        if ((dt = TGET(a, dtype, s_dtype)) == NULL)
            return NULL;
        if (!scalar_keeps_dtype(dt) || !plain_options(av, n))
            goto decline_several;
        pos = AT0;
        if ((tensors = PyTuple_Pack(1, a)) == NULL)
            goto error;
        if ((x = TGET(a, data, s_data)) == NULL)
            goto done;
        PyObject *fwd = OP(opdef, OP_FWD);
        if (fwd == NULL)
            goto done;
        PyObject *cargs[9] = {np, x};
        for (Py_ssize_t i = 1; i < n; i++)
            cargs[i + 1] = av[i];
        res = PyObject_Vectorcall(fwd, cargs, n + 1, NULL);
        Py_DECREF(fwd);
        if (res == NULL) {
            ret = fwd_failed(opdef, args, kwargs, tensors);
            goto done;
        }
    }
    else if (n == 2) {
        a = av[0];
        b = av[1];
        if (PyObject_TypeCheck(a, Tensor)) {
            if ((dt = TGET(a, dtype, s_dtype)) == NULL)
                return NULL;
            if (PyObject_TypeCheck(b, Tensor)) {
                if (TB(b)->dtype != dt || TF(b, device, CPU) != CPU)
                    goto decline_several;      /* (embedding(weight, idx)...) */
                pos = AT01;
                if ((x = TGET(a, data, s_data)) == NULL)
                    goto error;
                if ((y = TGET(b, data, s_data)) == NULL) {
                    Py_DECREF(x);
                    goto error;
                }
            }
            else if ((PyLong_CheckExact(b) || PyFloat_CheckExact(b)) &&
                     (r = number_keeps(dt, b)) != 0) {
                if (r < 0)
                    goto error;
                pos = AT0;
                if ((x = TGET(a, data, s_data)) == NULL)
                    goto error;
                y = Py_NewRef(b);
            }
            else
                goto decline;
        }
        else if ((PyLong_CheckExact(a) || PyFloat_CheckExact(a)) && PyObject_TypeCheck(b, Tensor)) {
            if ((dt = TGET(b, dtype, s_dtype)) == NULL)
                return NULL;
            if ((r = number_keeps(dt, a)) <= 0) {
                if (r < 0)
                    goto error;
                goto decline;
            }
            pos = AT1;
            x = Py_NewRef(a);
            if ((y = TGET(b, data, s_data)) == NULL) {
                Py_DECREF(x);
                goto error;
            }
            a = b;      /* the tensor: its device and category are checked below */
        }
        else
            return *handled = 0, NULL;
        /* from here x, y are owned */
        if (TF(a, device, CPU) != CPU)
            goto decline_xy;
        if ((r = below_float(dt)) < 0)
            goto error_xy;
        if (r) {
            PyObject *p = OP(opdef, OP_PROMOTE);
            if (p == NULL)
                goto error_xy;
            int keeps = p == Py_None ? 1 : PyObject_RichCompareBool(p, common, Py_EQ);
            Py_DECREF(p);
            if (keeps < 0)
                goto error_xy;
            if (!keeps)
                goto decline_xy;
        }
        else if (!scalar_keeps_dtype(dt))     /* float16/bfloat16 compute in float32 */
            goto decline_xy;
        tensors = pos == AT01 ? Py_NewRef(args) : PyTuple_Pack(1, pos == AT0 ? av[0] : av[1]);
        if (tensors == NULL)
            goto error_xy;
        PyObject *cargs[3] = {np, x, y};
        if ((res = forward(opdef, !r, cargs, 2)) == NULL) {
            ret = fwd_failed(opdef, args, kwargs, tensors);
            goto done;
        }
    }
    else if (n == 1) {
        a = av[0];
        if (!PyObject_TypeCheck(a, Tensor) || TF(a, device, CPU) != CPU)
            return *handled = 0, NULL;
        if ((dt = TGET(a, dtype, s_dtype)) == NULL)
            return NULL;
        pos = AT0;
        if ((r = below_float(dt)) < 0)
            goto error;
        if (r) {
            PyObject *p = OP(opdef, OP_PROMOTE);
            if (p == NULL)
                goto error;
            int keeps = p == Py_None ? 1 : PyObject_RichCompareBool(p, common, Py_EQ);
            Py_DECREF(p);
            if (keeps < 0)
                goto error;
            if (!keeps)
                goto decline;
        }
        else if (!scalar_keeps_dtype(dt))
            goto decline;
        tensors = Py_NewRef(args);
        if ((x = TGET(a, data, s_data)) == NULL)
            goto done;
        PyObject *cargs[2] = {np, x};
        if ((res = forward(opdef, !r, cargs, 1)) == NULL) {
            ret = fwd_failed(opdef, args, kwargs, tensors);
            goto done;
        }
    }
    else
        return *handled = 0, NULL;

    /* several arrays with nothing to record (sort, topk, var_mean...): each wrapped here, as
     * _finish would, without its Python (~2 us of a small call) */
    if (PyTuple_CheckExact(res) && (r = records(opdef, tensors)) <= 0) {
        Py_ssize_t k = PyTuple_GET_SIZE(res);
        for (Py_ssize_t i = 0; r == 0 && i < k; i++)
            r = Py_TYPE(PyTuple_GET_ITEM(res, i)) != (PyTypeObject *)ndarray;
        for (Py_ssize_t i = 0; r == 0 && (out || (out = PyTuple_New(k))) && i < k; i++) {
            PyObject *o = wrap_like(PyTuple_GET_ITEM(res, i), dt);
            if (o == NULL)
                Py_CLEAR(out);
            else
                PyTuple_SET_ITEM(out, i, o);
            r = o == NULL ? -1 : 0;
        }
        if (r <= 0) {   /* (1: a NumPy scalar or another object, for _finish below) */
            ret = Py_XNewRef(out);
            goto done;
        }
    }
    if (Py_TYPE(res) != (PyTypeObject *)ndarray) {
        if ((r = PyObject_IsInstance(res, np_generic)) < 0)
            goto done;
        if (!r) {
            ret = PyObject_CallFunction(finish, "OOOOOOO", opdef, args, kwargs, tensors, res,
                                        CPU, Py_None);
            goto done;
        }
        Py_SETREF(res, PyObject_CallOneArg(np_asarray, res));
        if (res == NULL)
            goto done;
    }
    /* the output Tensor, as Tensor._wrap: object.__new__(Tensor), then _data and dtype */
    if ((out = wrap_like(res, dt)) == NULL || (r = records(opdef, tensors)) < 0)
        goto done;
    if (r) {    /* the tensors' arrays, in order */
        PyObject *datas[2] = {pos == AT1 ? y : x, y};
        if (record_one(opdef, args, kwargs, tensors, pos, out, dt, datas) < 0)
            goto done;
    }
    ret = Py_NewRef(out);
done:
    Py_XDECREF(x);
    Py_XDECREF(y);
    Py_XDECREF(out);
    Py_XDECREF(res);
    Py_XDECREF(tensors);
    Py_XDECREF(dt);
    return ret;
decline_xy:
    Py_DECREF(x);
    Py_DECREF(y);
decline:
    Py_XDECREF(dt);
    *handled = 0;
    return NULL;
decline_several:        /* declined, as the Python dispatch hands the call to _tensors */
    Py_XDECREF(dt);
    *handled = -1;
    return NULL;
error_xy:
    Py_DECREF(x);
    Py_DECREF(y);
error:
    Py_XDECREF(dt);
    return NULL;
}

#include "view.h"     /* view_path: dispatch._view; ViewFn */

/* dispatch._tensor_list's call where no graph is recorded, in C: a list (or tuple) of plain
 * cpu tensors of one float dtype first, plain options after it (cat, stack). *handled = 0:
 * the Python helper takes it (a tensor that requires grad, another dtype, a forward that
 * refuses the call and so raises in torch's words there) */
static PyObject *list_path(PyObject *opdef, PyObject *args, int *handled)
{
    PyObject *first = PyTuple_GET_ITEM(args, 0), *dt = NULL, *res, *out, *fwd;
    PyObject *const *items = PySequence_Fast_ITEMS(first);
    Py_ssize_t k = PySequence_Fast_GET_SIZE(first), n = PyTuple_GET_SIZE(args);
    int grad = GRAD_ENABLED();
    *handled = 0;
    if (grad < 0)
        return *handled = 1, NULL;
    if (k == 0 || n > 8 || !plain_options(&PyTuple_GET_ITEM(args, 0), n))
        return NULL;
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *t = items[i];
        if (!PyObject_TypeCheck(t, Tensor) || TF(t, device, CPU) != CPU ||
            TB(t)->data == NULL || Py_TYPE(TB(t)->data) != (PyTypeObject *)ndarray ||
            (dt != NULL && TB(t)->dtype != dt) || (grad && TF(t, requires_grad, Py_False) !=
                                                   Py_False))
            return NULL;
        dt = TB(t)->dtype;
    }
    if (dt == NULL || !scalar_keeps_dtype(dt))
        return NULL;
    PyObject *arrays = PyList_New(k), *cargs[9] = {np};
    if (arrays == NULL)
        return *handled = 1, NULL;
    for (Py_ssize_t i = 0; i < k; i++)
        PyList_SET_ITEM(arrays, i, Py_NewRef(TB(items[i])->data));
    cargs[1] = arrays;
    for (Py_ssize_t i = 1; i < n; i++)
        cargs[i + 1] = PyTuple_GET_ITEM(args, i);
    if ((fwd = OP(opdef, OP_FWD)) == NULL) {
        Py_DECREF(arrays);
        return *handled = 1, NULL;
    }
    res = PyObject_Vectorcall(fwd, cargs, n + 1, NULL);
    Py_DECREF(fwd);
    Py_DECREF(arrays);
    if (res == NULL)    /* (the Python helper runs it again and raises in torch's words) */
        return *handled = !refused(), NULL;
    if (Py_TYPE(res) != (PyTypeObject *)ndarray) {
        Py_DECREF(res);
        return NULL;
    }
    out = wrap_like(res, dt);
    Py_DECREF(res);
    *handled = 1;
    return out;
}

static PyObject *run(PyObject *opdef, PyObject *args, PyObject *kwargs)
{
    int r, view, handled;
    PyObject *given = args, *full = NULL, *ret;
    if (!fast_on || (kwargs != NULL && kwargs != Py_None && !PyDict_Check(kwargs)))
        return slow(opdef, args, kwargs);
    if ((view = op_truth(opdef, OP_VIEW)) < 0)
        return NULL;
    PyObject *names[5] = {s_autocast, s_tracer, s_profiler, s_transform, s_override};
    if ((r = hooks_off(hooks, names, 5)) < 0)
        return NULL;
    if (!r)
        return slow(opdef, args, kwargs);
    if (kwargs != NULL && kwargs != Py_None && PyDict_GET_SIZE(kwargs)) {
        /* options by name moved into their places, as dispatch does */
        if ((full = positional_of(opdef, args, kwargs)) == NULL)
            return NULL;
        if (!PyTuple_CheckExact(full)) {
            Py_DECREF(full);
            /* (keyword-only options: dispatch._tensors with them, as the Python dispatch) */
            ret = view ? NULL : several_path(opdef, args, kwargs, &handled);
            return view || !handled ? slow(opdef, args, kwargs) : ret;
        }
        args = full;
    }
    PyObject *first = PyTuple_GET_SIZE(args) ? PyTuple_GET_ITEM(args, 0) : NULL;
    if (!view && first != NULL && (PyList_CheckExact(first) || PyTuple_CheckExact(first))) {
        /* a list of tensors first (cat, stack): in C where no graph is recorded, else
         * dispatch._tensor_list, without the hop through the Python dispatch */
        ret = list_path(opdef, args, &handled);
        if (!handled) {
            ret = PyObject_CallFunctionObjArgs(tensor_list, opdef, args, NULL);
            handled = ret != Py_None;
            if (!handled)
                Py_DECREF(ret);
        }
    }
    else
        ret = view ? view_path(opdef, args, &handled) :
            fast(opdef, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), args, empty_dict,
                 &handled);
    if (handled < 0)
        ret = several_path(opdef, args, empty_dict, &handled);
    if (!handled)   /* (a view the quick path declines: the reference, with the call as given) */
        ret = view ? slow(opdef, given, kwargs) : slow(opdef, args, full ? empty_dict : kwargs);
    Py_XDECREF(full);
    return ret;
}

static PyObject *dispatch(PyObject *self, PyObject *const *av, Py_ssize_t n)
{
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "ember._C.dispatch._dispatch: init() was not called");
        return NULL;
    }
    if (n != 3) {
        PyErr_SetString(PyExc_TypeError, "dispatch(opdef, args, kwargs)");
        return NULL;
    }
    if (!PyTuple_CheckExact(av[1]))       /* a list of arguments: the reference handles it */
        return slow(av[0], av[1], av[2]);
    return run(av[0], av[1], av[2]);
}

#include "operator.h"     /* Tensor.__add__ and friends */
#include "inplace.h"      /* dispatch_inplace: self.<op>_(...) */

/* ---- set-up ------------------------------------------------------------------------------ */

static PyObject *init(PyObject *self, PyObject *cfg)
{
    struct { const char *name; PyObject **slot; } items[] = {
        {"Tensor", (PyObject **)&Tensor}, {"CPU", &CPU}, {"np", &np}, {"ndarray", &ndarray},
        {"generic", &np_generic}, {"asarray", &np_asarray}, {"scalar_keeps", &scalar_keeps},
        {"grad_state", &grad_state}, {"hooks", &hooks}, {"dispatch", &py_dispatch},
        {"finish", &finish}, {"record", &record}, {"simple_node", &simple_node},
        {"explain", &explain}, {"SparseOperand", &sparse_operand},
        {"sparse_dispatch", &sparse_dispatch}, {"AT0", &AT0}, {"AT1", &AT1}, {"AT01", &AT01},
        {"dtype_of", &dtype_of}, {"operands", &operands}, {"not_operand", &not_operand},
        {"SimpleNode", (PyObject **)&SimpleNode}, {"saved_hooks", &saved_hooks},
        {"anomaly", &anomaly}, {"seq", &seq_iter}, {"TensorMeta", &meta_type},
        {"no_kwargs", &no_kwargs}, {"no_edge", &no_edge}, {"edge_of", &edge_of},
        {"UntypedStorage", (PyObject **)&Storage}, {"view_outputs", &view_outputs},
        {"root", &root_fn}, {"float16", &opmath[0]}, {"bfloat16", &opmath[1]},
        {"dispatch_inplace", &py_dispatch_inplace}, {"np_errstate", &np_errstate},
        {"np_ignore", &np_ignore}, {"int_bounds", &int_bounds}, {"positional", &positional},
        {"places", &places}, {"tensor_list", &tensor_list}};
    if (!PyDict_Check(cfg)) {
        PyErr_SetString(PyExc_TypeError, "init(dict)");
        return NULL;
    }
    for (size_t i = 0; i < sizeof items / sizeof *items; i++) {
        PyObject *v = PyDict_GetItemString(cfg, items[i].name);
        if (v == NULL)
            return PyErr_Format(PyExc_KeyError, "init: %s missing", items[i].name);
        Py_XSETREF(*items[i].slot, Py_NewRef(v));
    }
    if (!PyContextVar_CheckExact(np_errstate))     /* (NumPy 1: None, no silencing here) */
        Py_CLEAR(np_errstate);
    if (!PyType_Check(Tensor) || !PyType_IsSubtype(Tensor, &TensorBaseType) ||
        !PyTuple_Check(scalar_keeps) || !PyDict_CheckExact(int_bounds))
        return PyErr_Format(PyExc_TypeError, "init: Tensor must be a TensorBase subclass, "
                            "scalar_keeps a tuple, int_bounds a dict");
    PyObject *f = PyDict_GetItemString(cfg, "FLOAT");
    if (f == NULL || (FLOAT = PyLong_AsLong(f)) == -1)
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_KeyError, "init: FLOAT");
    PyObject *dtt = PyDict_GetItemString(cfg, "dtype");
    if (dtt == NULL || !PyType_Check(dtt))
        return PyErr_Format(PyExc_KeyError, "init: dtype");
    PyObject *names[2] = {s_category, s_np};
    Py_ssize_t *offs[2] = {&off_category, &off_np};
    for (int i = 0; i < 2; i++) {
        PyObject *m = PyObject_GetAttr(dtt, names[i]);
        if (m == NULL)
            return NULL;
        if (Py_TYPE(m) != &PyMemberDescr_Type) {
            Py_DECREF(m);
            return PyErr_Format(PyExc_TypeError, "init: dtype.%U is not a slot", names[i]);
        }
        *offs[i] = ((PyMemberDescrObject *)m)->d_member->offset;
        Py_DECREF(m);
    }
    Py_XSETREF(dtype_type, (PyTypeObject *)Py_NewRef(dtt));
    for (int i = 0; i < ND_N && PyType_Check(ndarray); i++) {
        PyObject *d = PyObject_GetAttrString(ndarray, nd_names[i]);    /* (the descriptor) */
        if (d == NULL)
            return NULL;
        if (Py_TYPE(d)->tp_descr_get == NULL)
            Py_CLEAR(d);        /* (not a descriptor: ND uses getattr) */
        Py_XSETREF(nd_descr[i], d);
    }
    if (!PyType_Check(SimpleNode) || !PyList_Check(saved_hooks) ||
        !PyType_IsSubtype((PyTypeObject *)meta_type, &PyTuple_Type))
        return PyErr_Format(PyExc_TypeError, "init: SimpleNode, saved_hooks, TensorMeta");
    for (int i = 0; i < N_SLOTS; i++) {     /* the node's slots, found by offset */
        PyObject *m = PyObject_GetAttrString((PyObject *)SimpleNode, node_slots[i]);
        if (m == NULL)
            return NULL;
        int ok = Py_TYPE(m) == &PyMemberDescr_Type &&
            ((PyMemberDescrObject *)m)->d_common.d_type == SimpleNode;
        if (ok)
            node_off[i] = ((PyMemberDescrObject *)m)->d_member->offset;
        Py_DECREF(m);
        if (!ok)
            return PyErr_Format(PyExc_TypeError, "init: SimpleNode.%s is not its slot",
                                node_slots[i]);
    }
    if (!PyType_Check(Storage))
        return PyErr_Format(PyExc_TypeError, "init: UntypedStorage");
    for (int i = 0; i < ST_SLOTS; i++) {    /* the storage's slots, found by offset */
        PyObject *m = PyObject_GetAttrString((PyObject *)Storage, storage_slots[i]);
        if (m == NULL)
            return NULL;
        int ok = Py_TYPE(m) == &PyMemberDescr_Type &&
            ((PyMemberDescrObject *)m)->d_common.d_type == Storage;
        if (ok)
            storage_off[i] = ((PyMemberDescrObject *)m)->d_member->offset;
        Py_DECREF(m);
        if (!ok)
            return PyErr_Format(PyExc_TypeError, "init: UntypedStorage.%s is not its slot",
                                storage_slots[i]);
    }
    ready = 1;
    Py_RETURN_NONE;
}

/* data_ptr(a): an ndarray's data address as an int (None for None), for the ctypes kernel
 * wrappers: a.ctypes.data builds a ctypes helper object each call. numpy's array
 * struct (PyArrayObject_fields, public ABI in numpy 1 and 2) starts with the data pointer
 * right after the object header; anything not an ndarray takes the .ctypes path. */
static int is_ndarray(PyObject *a)
{
    return ndarray != NULL && PyObject_TypeCheck(a, (PyTypeObject *)ndarray);
}
#define ND_DATA(a) (((struct { PyObject_HEAD char *data; } *)(a))->data)

static PyObject *data_ptr(PyObject *self, PyObject *a)
{
    if (a == Py_None)
        Py_RETURN_NONE;
    if (is_ndarray(a))
        return PyLong_FromVoidPtr(ND_DATA(a));
    PyObject *c = PyObject_GetAttrString(a, "ctypes");
    if (c == NULL)
        return NULL;
    PyObject *r = PyObject_GetAttrString(c, "data");
    Py_DECREF(c);
    return r;
}

/* kcall(address, sig, *args): the kernel library's function at ``address`` called with
 * ``args`` as ``sig`` (bytes: the result's kind, 'v' none, 'i' int or 'l' int64, then one
 * letter per argument: 'p' a pointer from an int, None or ndarray, 'i'/'l' an integer, 'd' a
 * double). ctypes spends ~15k instructions on a ten-argument call; this a few hundred. Under
 * the System V x86-64 and Linux AArch64 conventions integer-class and floating-point arguments
 * fill two separate register sequences and only integers spill to the stack (in order, one
 * 8-byte slot each) while there are at most 8 doubles, so a function called as f(i0..i19,
 * d0..d7) receives what its own prototype reads; elsewhere KCALL is off and ctypes is used. */
#if (defined(__x86_64__) || defined(__aarch64__)) && !defined(_WIN32) && !defined(__APPLE__)
#define KCALL 1
typedef int64_t (*kfn_t)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int64_t, double, double, double, double,
                         double, double, double, double);
static PyObject *kcall(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    int64_t iv[20] = {0};
    double dv[8] = {0};
    int ni = 0, nd = 0;
    if (n < 2 || !PyBytes_Check(args[1]) || PyBytes_GET_SIZE(args[1]) != n - 1)
        return PyErr_Format(PyExc_TypeError, "kcall: a signature of one letter per argument");
    const char *sig = PyBytes_AS_STRING(args[1]);
    kfn_t fn = (kfn_t)PyLong_AsVoidPtr(args[0]);
    for (Py_ssize_t k = 2; k < n; k++) {
        PyObject *a = args[k];
        char c = sig[k - 1];
        if (c == 'd') {
            if (nd == 8)
                return PyErr_Format(PyExc_TypeError, "kcall: more than 8 doubles");
            dv[nd++] = PyFloat_AsDouble(a);
        } else {
            if (ni == 20)
                return PyErr_Format(PyExc_TypeError, "kcall: more than 20 integer arguments");
            if (c == 'p' && a == Py_None)
                iv[ni++] = 0;
            else if (c == 'p' && is_ndarray(a))
                iv[ni++] = (int64_t)ND_DATA(a);
            else
                iv[ni++] = c == 'p' ? (int64_t)PyLong_AsVoidPtr(a) : PyLong_AsLongLong(a);
        }
    }
    if (fn == NULL || PyErr_Occurred())
        return NULL;
    int64_t r = fn(iv[0], iv[1], iv[2], iv[3], iv[4], iv[5], iv[6], iv[7], iv[8], iv[9], iv[10],
                   iv[11], iv[12], iv[13], iv[14], iv[15], iv[16], iv[17], iv[18], iv[19],
                   dv[0], dv[1], dv[2], dv[3], dv[4], dv[5], dv[6], dv[7]);
    if (sig[0] == 'v')
        Py_RETURN_NONE;
    return PyLong_FromLongLong(sig[0] == 'i' ? (int64_t)(int)r : r);
}
#endif

static PyObject *fast_path(PyObject *self, PyObject *on)
{
    int was = fast_on, r = PyObject_IsTrue(on);
    if (r < 0)
        return NULL;
    fast_on = r;
    return PyBool_FromLong(was);
}

static PyMethodDef methods[] = {
    {"dispatch", (PyCFunction)(void (*)(void))dispatch, METH_FASTCALL,
     "dispatch(opdef, args, kwargs): dispatch.py's dispatch, its fast path in C."},
    {"dispatch_inplace", (PyCFunction)(void (*)(void))dispatch_inplace,
     METH_FASTCALL | METH_KEYWORDS,
     "dispatch_inplace(opdef, self, args, kwargs): dispatch.py's dispatch_inplace, its common "
     "call in C."},
    {"operator", make_operator, METH_VARARGS,
     "operator(opdef, reflected): a Tensor operator method calling dispatch."},
    {"fast_path", fast_path, METH_O,
     "fast_path(on): turn the fast path on or off (off: dispatch, dispatch_inplace and the "
     "operators call the Python dispatch); returns the previous setting."},
    {"init", init, METH_O, "init(objects): the Python objects the fast path works with."},
    {"data_ptr", data_ptr, METH_O, "data_ptr(a): a NumPy array's data address (None for None)."},
#ifdef KCALL
    {"kcall", (PyCFunction)(void (*)(void))kcall, METH_FASTCALL,
     "kcall(address, sig, *args): a kernel library function called without ctypes."},
#endif
    {"backward_loop", (PyCFunction)(void (*)(void))backward_loop, METH_FASTCALL,
     "backward_loop(ready, buffers, deps, retain_graph, create_graph, accumulate): "
     "engine.run_backward's loop (its plain case), in C."},
    {"dependencies", dependencies, METH_O,
     "dependencies(roots): engine._dependencies, in C."},
    {"init_engine", init_engine, METH_O, "init_engine(objects): the engine's Python helpers."},
    {"simple_node", (PyCFunction)(void (*)(void))simple_node_c, METH_FASTCALL,
     "simple_node(opdef, args, tensors, positions, out): graph.simple_node, in C."},
    {"view_function", (PyCFunction)(void (*)(void))view_function, METH_FASTCALL,
     "view_function(opdef, rest, kwargs, parent_fn): dispatch.view_function, in C."},
    {"tensor_defaults", (PyCFunction)(void (*)(void))tensor_defaults, METH_FASTCALL,
     "tensor_defaults(cpu, Size): the device of a new tensor (TensorBase's default), and the "
     "type of its shape."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dispatch",
                                    "dispatch's fast path in C (see ember/_ops/dispatch.py).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__dispatch(void)
{
    struct { PyObject **slot; const char *s; } strs[] = {
        {&s_view, "view"}, {&s_autocast, "autocast"}, {&s_tracer, "tracer"},
        {&s_profiler, "profiler"}, {&s_transform, "transform"}, {&s_override, "override"},
        {&s_dtype, "dtype"},
        {&s_device, "device"},
        {&s_data, "_data"}, {&s_category, "category"}, {&s_promote, "promote"},
        {&s_fwd, "fwd"}, {&s_np, "np"}, {&s_grad_enabled, "grad_enabled"},
        {&s_differentiable, "differentiable"}, {&s_requires_grad, "_requires_grad"},
        {&s_vjp_fn, "vjp_fn"}, {&s_nondiff_outputs, "nondiff_outputs"},
        {&s_grad_fn, "grad_fn"}, {&common, "common"}, {&s_base, "_base"},
        {&s_output_nr, "_output_nr"}, {&s_grad_acc, "_grad_acc"},
        {&s_grad_accumulator, "_grad_accumulator"}, {&s_shape, "shape"}, {&s_save, "save"},
        {&s_needed_by, "needed_by"}, {&s_save_result, "save_result"}, {&s_version, "_version"},
        {&s_storage, "_storage"}, {&s_alias, "_alias"}, {&s_enabled, "enabled"},
        {&s_n_outputs, "n_outputs"}, {&s_tensor_pre_hooks, "_tensor_pre_hooks"},
        {&s_retain_grad_hooks, "_retain_grad_hooks"}, {&s_pre_hooks, "_pre_hooks"},
        {&s_hooks, "_hooks"}, {&s_trace, "_trace"}, {&s_next_functions, "next_functions"},
        {&s_input_meta, "input_meta"}, {&s_apply, "apply"}, {&s_release, "release"},
        {&s_seq, "seq"}, {&s_base_arr, "base"}, {&s_accumulate, "accumulate"},
        {&s_ufunc, "ufunc"}, {&s_multi_output, "multi_output"}, {&s_get_storage, "_get_storage"},
        {&s_promote_args, "promote_args"}, {&s_writes_overlap, "writes_overlap"},
        {&s_into, "into"}, {&s_params, "params"}, {&s_defaults, "defaults"},
        {&s_simple_type, "simple_type"}};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
        if ((*strs[i].slot = PyUnicode_InternFromString(strs[i].s)) == NULL)
            return NULL;
    if ((zero = PyLong_FromLong(0)) == NULL || (one = PyLong_FromLong(1)) == NULL ||
        (empty_dict = PyDict_New()) == NULL || (empty_tuple = PyTuple_New(0)) == NULL ||
        (kw_out = Py_BuildValue("(s)", "out")) == NULL)
        return NULL;
    t_zero = zero;
    PyObject *opn[OP_N] = {s_view, s_fwd, s_promote, s_differentiable, s_vjp_fn,
                           s_nondiff_outputs, s_save, s_save_result, s_needed_by, s_ufunc,
                           s_promote_args, s_writes_overlap, s_into, s_params, s_defaults,
                           s_simple_type};
    memcpy(op_names, opn, sizeof opn);
    /* object's own tp_new, so object.__new__(Tensor) passes its "is it safe" check */
    TensorBaseType.tp_new = PyBaseObject_Type.tp_new;
    SizeBaseType.tp_base = &PyTuple_Type;
    if (PyType_Ready(&OperatorType) < 0 || PyType_Ready(&TensorBaseType) < 0 ||
        PyType_Ready(&ViewFnType) < 0 || PyType_Ready(&SizeBaseType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddObjectRef(m, "TensorBase", (PyObject *)&TensorBaseType) < 0 ||
                      PyModule_AddObjectRef(m, "SizeBase", (PyObject *)&SizeBaseType) < 0))
        Py_CLEAR(m);
    return m;
}
