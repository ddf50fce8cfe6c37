/* An OpDef's attributes as the fast path reads them (included by _dispatch.c).
 *
 * Each op call reads about ten of them (fwd, view, differentiable, vjp_fn, save...), each a
 * dict lookup through ATTR: a large share of an op's forward and backward.
 * They are cached here per OpDef, with the version tag of its __dict__ (and its type's), which
 * CPython changes on every write: an attribute set later (``opdef.fwd = ...``) is seen at
 * once. Where there is no such tag to rely on (Python 3.13+), every read is ATTR's. */

enum {OP_VIEW, OP_FWD, OP_PROMOTE, OP_DIFF, OP_VJP, OP_NONDIFF, OP_SAVE, OP_SAVE_RESULT,
      OP_NEEDED_BY, OP_UFUNC, OP_PROMOTE_ARGS, OP_WRITES_OVERLAP,
      OP_INTO, OP_PARAMS, OP_DEFAULTS, OP_SIMPLE_TYPE, OP_N};
static PyObject *op_names[OP_N];    /* set up in PyInit (the interned s_* strings) */

typedef struct {
    PyObject *opdef;                /* identity only (the versions make a stale entry miss) */
    uint64_t version;
    unsigned int type_tag;
    PyObject *v[OP_N];              /* owned */
} OpEntry;

#define OP_CACHE 256
static OpEntry op_cache[OP_CACHE];

/* the version tag of o's __dict__; 0 when there is none to use */
static uint64_t dict_version(PyObject *o)
{
#if PY_VERSION_HEX < 0x030D0000
    PyObject **dp = _PyObject_GetDictPtr(o);
    if (dp == NULL || *dp == NULL)
        return 0;
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    return ((PyDictObject *)*dp)->ma_version_tag;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#else
    (void)o;
    return 0;
#endif
}

/* opdef.<op_names[i]>, new reference (NULL on error) */
static PyObject *OP(PyObject *opdef, int i)
{
    OpEntry *e = &op_cache[((uintptr_t)opdef >> 4) % OP_CACHE];
    PyTypeObject *tp = Py_TYPE(opdef);
    uint64_t ver = dict_version(opdef);
    if (ver == 0)
        return ATTR(opdef, op_names[i]);
    if (e->opdef == opdef && e->version == ver && e->type_tag != 0 &&
        (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && tp->tp_version_tag == e->type_tag)
        return Py_NewRef(e->v[i]);
    PyObject *v[OP_N];
    for (int k = 0; k < OP_N; k++)
        if ((v[k] = ATTR(opdef, op_names[k])) == NULL) {
            /* (a missing one: not cached, the caller gets ATTR's answer) */
            for (int j = 0; j < k; j++)
                Py_DECREF(v[j]);
            PyErr_Clear();
            return ATTR(opdef, op_names[i]);
        }
    PyObject *ret = Py_NewRef(v[i]), *old[OP_N];
    /* (ATTR may have materialised the dict: its version is read again; a getattr that ran
     * Python code may have written to it, in which case the next call refills) */
    ver = dict_version(opdef);
    _PyType_Lookup(tp, op_names[0]);     /* assigns tp a version tag if it has none */
    int had = e->opdef != NULL;
    memcpy(old, e->v, sizeof old);
    memcpy(e->v, v, sizeof v);
    e->opdef = opdef;
    e->version = ver;
    e->type_tag = (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
    if (had)        /* last: a finalizer run by these may call back into the cache */
        for (int k = 0; k < OP_N; k++)
            Py_XDECREF(old[k]);
    return ret;
}

static int op_truth(PyObject *opdef, int i)
{
    PyObject *v = OP(opdef, i);
    if (v == NULL)
        return -1;
    int r = v == Py_True ? 1 : v == Py_False || v == Py_None ? 0 : PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

static int op_is_none(PyObject *opdef, int i)
{
    PyObject *v = OP(opdef, i);
    if (v == NULL)
        return -1;
    Py_DECREF(v);
    return v == Py_None;
}

/* bool(o.name) for the grad-mode and anomaly states (instances whose flags may sit on their
 * class as defaults), cached against the version tags of o's __dict__ and its type as OP()
 * is: two dict lookups per read saved, read once or twice per op */
typedef struct {
    uint64_t version;
    unsigned int type_tag;
    int value;
} FlagCache;

static int flag(PyObject *o, PyObject *name, FlagCache *c)
{
    PyTypeObject *tp = Py_TYPE(o);
    uint64_t ver = dict_version(o);
    if (ver != 0 && c->version == ver && c->type_tag != 0 &&
        (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && tp->tp_version_tag == c->type_tag)
        return c->value;
    int r = truth_attr(o, name);
    if (r < 0)
        return r;
    _PyType_Lookup(tp, name);            /* assigns tp a version tag if it has none */
    c->version = dict_version(o);
    c->type_tag = (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
    c->value = r;
    return r;
}

static FlagCache grad_flag, anomaly_flag;
#define GRAD_ENABLED() flag(grad_state, s_grad_enabled, &grad_flag)
#define ANOMALY_ENABLED() flag(anomaly, s_enabled, &anomaly_flag)

/* the dispatch hooks (autocast, tracer, profiler: attributes of a class) are all None; cached
 * on the class's version tag, which an assignment to any of its attributes changes */
static int hooks_off(PyObject *hooks_cls, PyObject *const *names, int n)
{
    static unsigned int tag;
    PyTypeObject *tp = (PyTypeObject *)hooks_cls;
    if (!PyType_Check(hooks_cls))
        tag = 0;
    else if (tag != 0 && (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && tp->tp_version_tag == tag)
        return 1;
    for (int i = 0; i < n; i++) {
        int r = is_none_attr(hooks_cls, names[i]);
        if (r <= 0)
            return r;
    }
    if (PyType_Check(hooks_cls)) {
        _PyType_Lookup(tp, names[0]);
        tag = (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
    }
    return 1;
}
