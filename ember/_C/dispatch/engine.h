/* The backward engine's loop in C (included by _dispatch.c; ember/autograd/engine.py's
 * run_backward is the reference and calls this for the plain case: no ``inputs=``, no
 * profiler, no anomaly mode when it starts).
 *
 * The same steps in the same order as the Python loop: nodes popped highest sequence number
 * first (ties as torch's ready queue breaks them), gradients summed per node in ``buffers``,
 * tensor hooks, AccumulateGrad, node hooks and missing gradients handed to the engine's own Python helpers (_run_tensor_hooks,
 * _accumulate, _apply, _sum_to). What it saves is the interpreter's work on the common path:
 * the heap, the buffers and the per-edge shape/dtype test. */

static PyObject *AccumulateGrad, *run_tensor_hooks, *accumulate_fn, *apply_fn, *sum_to,
    *graph_mod, *kw_result, *s_running;
static PyObject *s_n_outputs, *s_tensor_pre_hooks, *s_retain_grad_hooks, *s_pre_hooks, *s_hooks,
    *s_trace, *s_next_functions, *s_input_meta, *s_apply, *s_release, *s_seq, *s_accumulate;

#include "nodes.h"      /* node_bare, accumulate_leaf, simple_apply, simple_release */

typedef struct { double key; PyObject *node; } HeapItem;
typedef struct { HeapItem *a; Py_ssize_t n, cap; } Heap;

/* keyed -node.seq alone: leaves' AccumulateGrads tie, and the heap's steps (heapq's, which are
 * libstdc++ priority_queue's) then give torch's ready-queue order among them */
static int heap_less(const HeapItem *x, const HeapItem *y)
{
    return x->key < y->key;
}

/* push node (a new reference is taken), as heapq.heappush */
static int heap_push(Heap *h, PyObject *node)
{
    PyObject *seq = IS_SIMPLE(node) && SLOT(node, N_SEQ) != NULL ?
        Py_NewRef(SLOT(node, N_SEQ)) : GET(node, s_seq);
    if (seq == NULL)
        return -1;
    double s = PyFloat_AsDouble(seq);
    Py_DECREF(seq);
    if (s == -1.0 && PyErr_Occurred())
        return -1;
    if (h->n == h->cap) {
        Py_ssize_t cap = h->cap ? 2 * h->cap : 16;
        HeapItem *a = PyMem_Realloc(h->a, cap * sizeof *a);
        if (a == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        h->a = a;
        h->cap = cap;
    }
    HeapItem it = {-s, Py_NewRef(node)};
    Py_ssize_t i = h->n++;
    while (i > 0 && heap_less(&it, &h->a[(i - 1) / 2])) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = it;
    return 0;
}

/* the owned top node, as heapq.heappop: the hole goes down to a leaf along the smaller child
 * (the right one on a tie), then the last item rises into it */
static PyObject *heap_pop(Heap *h)
{
    PyObject *top = h->a[0].node;
    HeapItem last = h->a[--h->n];
    Py_ssize_t i = 0, c;
    if (h->n == 0)
        return top;
    while ((c = 2 * i + 1) < h->n) {
        if (c + 1 < h->n && !heap_less(&h->a[c], &h->a[c + 1]))
            c++;
        h->a[i] = h->a[c];
        i = c;
    }
    while (i > 0 && heap_less(&last, &h->a[(i - 1) / 2])) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = last;
    return top;
}

static PyObject *nones(PyObject *node)     /* [None] * node.n_outputs */
{
    int bare = node_bare(node);
    if (bare < 0)
        return NULL;
    PyObject *v = bare ? PyLong_FromLong(1) : GET(node, s_n_outputs);
    if (v == NULL)
        return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    if (n < 0)
        return PyErr_Occurred() ? NULL : PyList_New(0);
    PyObject *l = PyList_New(n);
    for (Py_ssize_t i = 0; l != NULL && i < n; i++)
        PyList_SET_ITEM(l, i, Py_NewRef(Py_None));
    return l;
}

/* gradient g of an edge into (nxt, nr): reduced to the input's meta, summed into buffers */
static int add_to_buffer(PyObject *buffers, PyObject *nxt, PyObject *nr, PyObject *g,
                         PyObject *meta)
{
    int is_t = PyObject_TypeCheck(g, Tensor);
    PyObject *d = is_t ? TGET(g, data, s_data) : GET(g, s_data), *sh, *m0, *m1, *dt;
    if (d == NULL)
        return -1;
    sh = ND(d, ND_SHAPE, s_shape);
    Py_DECREF(d);
    if (sh == NULL)
        return -1;
    /* (TensorMeta subclasses tuple: PySequence_GetItem would call its __getitem__) */
    int tup = PyTuple_Check(meta) && PyTuple_GET_SIZE(meta) >= 2;
    if ((m0 = tup ? Py_NewRef(PyTuple_GET_ITEM(meta, 0)) : PySequence_GetItem(meta, 0)) == NULL) {
        Py_DECREF(sh);
        return -1;
    }
    int r = PyObject_RichCompareBool(sh, m0, Py_NE);
    Py_DECREF(sh);
    Py_DECREF(m0);
    if (r < 0)
        return -1;
    if (!r) {
        if ((m1 = tup ? Py_NewRef(PyTuple_GET_ITEM(meta, 1)) : PySequence_GetItem(meta, 1))
            == NULL)
            return -1;
        dt = is_t ? TGET(g, dtype, s_dtype) : GET(g, s_dtype);
        Py_DECREF(m1);
        if (dt == NULL)
            return -1;
        Py_DECREF(dt);
        r = dt != m1;
    }
    g = r ? PyObject_CallFunctionObjArgs(sum_to, g, meta, NULL) : Py_NewRef(g);
    if (g == NULL)
        return -1;
    PyObject *buf = PyDict_GetItemWithError(buffers, nxt);    /* borrowed */
    if (buf == NULL) {
        if (PyErr_Occurred() || (buf = nones(nxt)) == NULL)
            goto error;
        r = PyDict_SetItem(buffers, nxt, buf);
        Py_DECREF(buf);         /* the dict holds it */
        if (r < 0)
            goto error;
    }
    Py_ssize_t i = PyLong_AsSsize_t(nr);
    if (i == -1 && PyErr_Occurred())
        goto error;
    PyObject *old = PySequence_GetItem(buf, i);
    if (old == NULL)
        goto error;
    if (old != Py_None) {
        Py_SETREF(g, PyNumber_Add(old, g));
        if (g == NULL) {
            Py_DECREF(old);
            return -1;
        }
    }
    Py_DECREF(old);
    r = PySequence_SetItem(buf, i, g);
    Py_DECREF(g);
    return r;
error:
    Py_DECREF(g);
    return -1;
}

/* deps[nxt] -= 1; push nxt when it reaches 0 */
static int release_edge(PyObject *deps, PyObject *nxt, Heap *h)
{
    PyObject *v = PyDict_GetItemWithError(deps, nxt);
    if (v == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, nxt);
        return -1;
    }
    long left = PyLong_AsLong(v) - 1;
    if (left == -2 && PyErr_Occurred())
        return -1;
    if ((v = PyLong_FromLong(left)) == NULL)
        return -1;
    int r = PyDict_SetItem(deps, nxt, v);
    Py_DECREF(v);
    if (r < 0)
        return -1;
    return left == 0 ? heap_push(h, nxt) : 0;
}

/* one node's step; 0 or -1 */
static int backward_step(PyObject *node, PyObject *buffers, PyObject *deps, Heap *h,
                         PyObject *retain, PyObject *create, int accumulate)
{
    PyObject *grads = PyDict_GetItemWithError(buffers, node), *gi = NULL, *nf = NULL;
    PyObject *im = NULL, *gs = NULL;
    int r, ret = -1;
    if (grads != NULL) {
        Py_INCREF(grads);
        if (PyDict_DelItem(buffers, node) < 0)
            goto done;
        if ((r = PyObject_IsTrue(grads)) < 0)
            goto done;
        if (!r)
            Py_CLEAR(grads);
    }
    else if (PyErr_Occurred())
        return -1;
    if (grads == NULL && (grads = nones(node)) == NULL)
        return -1;
    int bare = node_bare(node);     /* no hooks of any kind: their checks are skipped */
    if ((r = bare) == 0 && (r = truth_attr(node, s_tensor_pre_hooks)) == 0)
        r = truth_attr(node, s_retain_grad_hooks);
    if (r < 0)
        goto done;
    if (r && !bare) {
        PyObject *v = PyObject_CallFunctionObjArgs(run_tensor_hooks, node, grads, NULL);
        if (v == NULL)
            goto done;
        Py_DECREF(v);
    }
    if (Py_TYPE(node) == (PyTypeObject *)AccumulateGrad) {
        if (accumulate) {
            PyObject *g0 = PySequence_GetItem(grads, 0);
            if (g0 == NULL)
                goto done;
            Py_DECREF(g0);
            if (g0 != Py_None && !bare && ((r = truth_attr(node, s_pre_hooks)) != 0 ||
                                           (r = truth_attr(node, s_hooks)) != 0)) {
                if (r < 0)
                    goto done;
                PyObject *v = PyObject_CallFunctionObjArgs(accumulate_fn, node, grads, create,
                                                           NULL);
                if (v == NULL)
                    goto done;
                Py_DECREF(v);
            }
            else if (g0 != Py_None && (r = accumulate_leaf(node, g0, create)) != 0) {
                if (r < 0)
                    goto done;
            }
            else if (g0 != Py_None) {
                /* no pre-hooks: engine._accumulate's call, made here. (g0 stays borrowed from
                 * grads: accumulate counts the references to decide whether .grad may take
                 * the gradient itself) */
                PyObject *cargs[3] = {node, g0, create};
                PyObject *v = PyObject_VectorcallMethod(s_accumulate, cargs,
                                                        3, NULL);
                if (v == NULL)
                    goto done;
                Py_DECREF(v);
            }
        }
        ret = 0;
        goto done;
    }
    int plain = 1;
    PyObject *names[2] = {s_pre_hooks, s_hooks};
    for (int i = 0; i < 2 && plain && !bare; i++) {
        if ((r = truth_attr(node, names[i])) < 0)
            goto done;
        plain = !r;
    }
    if (plain && !bare) {
        if ((r = is_none_attr(node, s_trace)) < 0)
            goto done;
        plain = r;
    }
    if (plain) {
        if ((r = ANOMALY_ENABLED()) < 0)
            goto done;
        plain = !r;
    }
    if ((gs = PySequence_Fast(grads, "grads")) == NULL)
        goto done;
    for (Py_ssize_t i = 0; plain && i < PySequence_Fast_GET_SIZE(gs); i++)
        if (PySequence_Fast_GET_ITEM(gs, i) == Py_None)
            plain = 0;
    if (plain) {
        int handled = 0, simple = IS_SIMPLE(node);
        if (simple && (gi = simple_apply(node, grads, &handled)) == NULL && handled)
            goto done;
        if (!handled && (gi = PyObject_CallMethodOneArg(node, s_apply, grads)) == NULL)
            goto done;
        if ((r = PyObject_IsTrue(retain)) < 0)
            goto done;
        if (!r && simple)
            simple_release(node);
        else if (!r) {
            PyObject *v = PyObject_CallMethodNoArgs(node, s_release);
            if (v == NULL)
                goto done;
            Py_DECREF(v);
        }
    }
    else if ((gi = PyObject_CallFunctionObjArgs(apply_fn, node, grads, retain, NULL)) == NULL)
        goto done;
    Py_SETREF(gi, PySequence_Fast(gi, "a node's apply() must return a sequence"));
    if (gi == NULL)
        goto done;
    if (IS_SIMPLE(node) && SLOT(node, N_NEXT) != NULL && SLOT(node, N_META) != NULL) {
        nf = Py_NewRef(SLOT(node, N_NEXT));
        im = Py_NewRef(SLOT(node, N_META));
    }
    else if ((nf = GET(node, s_next_functions)) == NULL || (im = GET(node, s_input_meta)) == NULL)
        goto done;
    Py_SETREF(nf, PySequence_Fast(nf, "next_functions"));
    if (nf == NULL)
        goto done;
    Py_SETREF(im, PySequence_Fast(im, "input_meta"));
    if (im == NULL)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(nf);      /* zip(): the shortest decides */
    if (PySequence_Fast_GET_SIZE(gi) < n)
        n = PySequence_Fast_GET_SIZE(gi);
    if (PySequence_Fast_GET_SIZE(im) < n)
        n = PySequence_Fast_GET_SIZE(im);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *e = PySequence_Fast_GET_ITEM(nf, k), *nxt, *nr;
        if (PyTuple_Check(e) && PyTuple_GET_SIZE(e) == 2) {
            nxt = PyTuple_GET_ITEM(e, 0);
            nr = PyTuple_GET_ITEM(e, 1);
        }
        else {
            PyErr_SetString(PyExc_TypeError, "next_functions: (node, output_nr) pairs");
            goto done;
        }
        if (nxt == Py_None)
            continue;
        PyObject *g = PySequence_Fast_GET_ITEM(gi, k);
        if (g != Py_None &&
            add_to_buffer(buffers, nxt, nr, g, PySequence_Fast_GET_ITEM(im, k)) < 0)
            goto done;
        if (release_edge(deps, nxt, h) < 0)
            goto done;
    }
    ret = 0;
done:
    Py_XDECREF(grads);
    Py_XDECREF(gs);
    Py_XDECREF(gi);
    Py_XDECREF(nf);
    Py_XDECREF(im);
    return ret;
}

/* dependencies(roots): engine._dependencies, {node: number of edges into it} below roots */
static PyObject *dependencies(PyObject *self, PyObject *roots)
{
    PyObject *deps = PyDict_New(), *stack = PyList_New(0), *seen = PySet_New(NULL), *one;
    if (deps == NULL || stack == NULL || seen == NULL || (one = PyLong_FromLong(1)) == NULL)
        goto error;
    Py_DECREF(one);             /* (a cached small int) */
    PyObject *rs = PySequence_Fast(roots, "roots");
    if (rs == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(rs); i++) {
        PyObject *n = PySequence_Fast_GET_ITEM(rs, i);
        if (n != Py_None && (PyList_Append(stack, n) < 0 || PySet_Add(seen, n) < 0)) {
            Py_DECREF(rs);
            goto error;
        }
    }
    Py_DECREF(rs);
    while (PyList_GET_SIZE(stack)) {
        Py_ssize_t top = PyList_GET_SIZE(stack) - 1;
        PyObject *node = Py_NewRef(PyList_GET_ITEM(stack, top)), *nf;
        if (PyList_SetSlice(stack, top, top + 1, NULL) < 0 ||
            (nf = IS_SIMPLE(node) && SLOT(node, N_NEXT) != NULL ?
             Py_NewRef(SLOT(node, N_NEXT)) : GET(node, s_next_functions)) == NULL) {
            Py_DECREF(node);
            goto error;
        }
        Py_DECREF(node);
        Py_SETREF(nf, PySequence_Fast(nf, "next_functions"));
        if (nf == NULL)
            goto error;
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(nf); k++) {
            PyObject *e = PySequence_Fast_GET_ITEM(nf, k), *nxt, *c;
            if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < 1) {
                PyErr_SetString(PyExc_TypeError, "next_functions: (node, output_nr) pairs");
                Py_DECREF(nf);
                goto error;
            }
            if ((nxt = PyTuple_GET_ITEM(e, 0)) == Py_None)
                continue;
            if ((c = PyDict_GetItemWithError(deps, nxt)) != NULL) {
                PyObject *v = PyNumber_Add(c, one);
                int r = v ? PyDict_SetItem(deps, nxt, v) : -1;
                Py_XDECREF(v);
                if (r < 0) {
                    Py_DECREF(nf);
                    goto error;
                }
                continue;
            }
            /* first reached: walk below it (a root already is walked) */
            int r = PyErr_Occurred() ? -1 : PyDict_SetItem(deps, nxt, one);
            if (r == 0 && (r = PySet_Contains(seen, nxt)) == 0)
                r = PyList_Append(stack, nxt);
            if (r < 0) {
                Py_DECREF(nf);
                goto error;
            }
        }
        Py_DECREF(nf);
    }
    Py_DECREF(stack);
    Py_DECREF(seen);
    return deps;
error:
    Py_XDECREF(deps);
    Py_XDECREF(stack);
    Py_XDECREF(seen);
    return NULL;
}

/* backward_loop(ready_nodes, buffers, deps, retain_graph, create_graph, accumulate) */
static PyObject *backward_loop(PyObject *self, PyObject *const *av, Py_ssize_t n)
{
    if (!ready || AccumulateGrad == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "backward_loop: init_engine() was not called");
        return NULL;
    }
    if (n != 6 || !PyList_Check(av[0]) || !PyDict_Check(av[1]) || !PyDict_Check(av[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "backward_loop(list, dict, dict, retain, create_graph, accumulate)");
        return NULL;
    }
    int accumulate = PyObject_IsTrue(av[5]);
    if (accumulate < 0)
        return NULL;
    Heap h = {NULL, 0, 0};
    PyObject *ret = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(av[0]); i++)
        if (heap_push(&h, PyList_GET_ITEM(av[0], i)) < 0)
            goto done;
    while (h.n) {
        PyObject *node = heap_pop(&h);
        int r = backward_step(node, av[1], av[2], &h, av[3], av[4], accumulate);
        Py_DECREF(node);
        if (r < 0)
            goto done;
    }
    ret = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; i < h.n; i++)
        Py_DECREF(h.a[i].node);
    PyMem_Free(h.a);
    return ret;
}

/* init_engine(objects): the engine helpers the loop hands the uncommon cases to */
static PyObject *init_engine(PyObject *self, PyObject *cfg)
{
    struct { const char *name; PyObject **slot; } items[] = {
        {"AccumulateGrad", &AccumulateGrad}, {"run_tensor_hooks", &run_tensor_hooks},
        {"accumulate", &accumulate_fn}, {"apply", &apply_fn}, {"sum_to", &sum_to},
        {"graph", &graph_mod}};
    if (!PyDict_Check(cfg)) {
        PyErr_SetString(PyExc_TypeError, "init_engine(dict)");
        return NULL;
    }
    for (size_t i = 0; i < sizeof items / sizeof *items; i++) {
        PyObject *v = PyDict_GetItemString(cfg, items[i].name);
        if (v == NULL)
            return PyErr_Format(PyExc_KeyError, "init_engine: %s missing", items[i].name);
        Py_XSETREF(*items[i].slot, Py_NewRef(v));
    }
    if (kw_result == NULL && (kw_result = Py_BuildValue("(s)", "result")) == NULL)
        return NULL;
    if ((s_grad_layout = PyUnicode_InternFromString("grad_layout")) == NULL ||
        (s_strides = PyUnicode_InternFromString("strides")) == NULL)
        return NULL;
    if (s_clone_base == NULL && (s_clone_base = PyUnicode_InternFromString("base")) == NULL)
        return NULL;
    /* AccumulateGrad's _variable slot, by offset */
    PyObject *m = PyObject_GetAttrString(AccumulateGrad, "_variable");
    if (m == NULL)
        return NULL;
    int ok = PyType_Check(AccumulateGrad) && Py_TYPE(m) == &PyMemberDescr_Type &&
        ((PyMemberDescrObject *)m)->d_common.d_type == (PyTypeObject *)AccumulateGrad;
    if (ok)
        off_variable = ((PyMemberDescrObject *)m)->d_member->offset;
    Py_DECREF(m);
    if (!ok)
        return PyErr_Format(PyExc_TypeError, "init_engine: AccumulateGrad._variable is not "
                            "its slot");
    AccType = (PyTypeObject *)AccumulateGrad;
    if (s_running == NULL && (s_running = PyUnicode_InternFromString("_running")) == NULL)
        return NULL;
    Py_RETURN_NONE;
}
