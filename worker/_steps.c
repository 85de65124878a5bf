/* staal.worker._steps: the C line counter behind staal.worker.limits.StepCounter.
 *
 * DESIGN.md section 4 ("Limits"). A Python trace function costs a Python call
 * per traced event; this one is a C function installed with PyEval_SetTrace,
 * as coverage.py's CTracer is, so a counted line costs a C call, a pointer
 * comparison and an increment.
 *
 * Counter(max_steps, counts, failure):
 *   counts(filename) -> bool   whether a code object whose co_filename is
 *                              `filename` is the program's own; asked once
 *                              per file name, the answer kept in a dict
 *                              (the file name strings are held, not the code
 *                              objects, so code compiled at run time does
 *                              not pile up);
 *   failure() -> exception     called when a line event passes max_steps;
 *                              the trace function raises what it returns.
 *
 * The last code object seen is held with a strong reference next to its
 * answer, so the fast path is one pointer comparison and a freed code object
 * whose address is reused can never inherit a stale answer.
 *
 * start() installs the counter as the C trace function of the current thread,
 * saving what was there; stop() puts that back and marks the counter stopped:
 * other threads where it is installed detach at their next trace event. The
 * counter is also callable as a Python trace function (threading.settrace(c),
 * or sys.settrace(sys.gettrace()) while it runs): called so, it installs
 * itself as the C trace function of the calling thread and returns None.
 *
 * Passing max_steps: the line event that makes `steps` max_steps + 1 (and any
 * later one in another thread) detaches the counter from its thread, as
 * CPython does for a Python trace function that raises, and raises
 * failure(). Counting relies on the GIL: a trace function runs holding it.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <limits.h>

typedef struct {
    PyObject_HEAD
    long long max_steps;
    long long steps;
    int running;
    PyObject *counts;       /* callable: filename -> bool */
    PyObject *failure;      /* callable: () -> exception instance */
    PyObject *decisions;    /* dict: filename (str) -> True / False */
    PyObject *last_code;    /* strong reference, or NULL */
    int last_counted;
    int saved;              /* whether saved_func / saved_obj hold anything */
    Py_tracefunc saved_func;
    PyObject *saved_obj;    /* strong reference, or NULL */
} Counter;

static PyTypeObject CounterType;

/* Set the calling thread's C trace function; -1 with an exception set if
 * an audit hook refuses "sys.settrace". */
static int
set_trace(Py_tracefunc func, PyObject *obj)
{
#if PY_VERSION_HEX < 0x030D0000
    return _PyEval_SetTrace(PyThreadState_Get(), func, obj);
#else
    PyEval_SetTrace(func, obj); /* reports a refusal as unraisable */
    return 0;
#endif
}

static int counter_trace(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg);

/* Remove the counter from the calling thread, from inside its trace function.
 * The thread state's reference to the counter goes with it: hold one. */
static int
detach(Counter *self)
{
    Py_INCREF(self);
    int result = set_trace(NULL, NULL);
    Py_DECREF(self);
    return result;
}

/* 1 if code of this code object is counted, 0 if not, -1 on error. May run
 * Python code (the `counts` callable), so other threads may run meanwhile. */
static int
decide(Counter *self, PyCodeObject *code)
{
    if (self->counts == NULL || self->decisions == NULL) {
        return 0;
    }
    PyObject *filename = code->co_filename;
    PyObject *decisions = self->decisions;
    PyObject *counts = self->counts;
    Py_INCREF(filename);
    Py_INCREF(decisions);
    Py_INCREF(counts);
    int counted = -1;
    PyObject *known = PyDict_GetItemWithError(decisions, filename); /* borrowed */
    if (known != NULL) {
        counted = (known == Py_True);
    }
    else if (!PyErr_Occurred()) {
        PyObject *answer = PyObject_CallOneArg(counts, filename);
        if (answer != NULL) {
            counted = PyObject_IsTrue(answer);
            Py_DECREF(answer);
            if (counted >= 0
                && PyDict_SetItem(decisions, filename, counted ? Py_True : Py_False) < 0) {
                counted = -1;
            }
        }
    }
    Py_DECREF(counts);
    Py_DECREF(decisions);
    Py_DECREF(filename);
    return counted;
}

/* The line event past max_steps: detach from this thread, raise failure(). */
static int
overflow(Counter *self)
{
    self->steps++;
    Py_INCREF(self);
    int result = -1;
    PyObject *failure = self->failure;
    PyObject *exc = NULL;
    if (failure == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the step counter was cleared");
        goto done;
    }
    Py_INCREF(failure);
    exc = PyObject_CallNoArgs(failure);
    Py_DECREF(failure);
    if (exc == NULL) {
        goto done;
    }
    if (!PyExceptionInstance_Check(exc)) {
        PyErr_Format(PyExc_TypeError,
                     "the step counter's failure() must return an exception, not %.100s",
                     Py_TYPE(exc)->tp_name);
        goto done;
    }
    if (set_trace(NULL, NULL) < 0) {
        goto done;
    }
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
done:
    Py_XDECREF(exc);
    Py_DECREF(self);
    return result;
}

static int
counter_trace(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    Counter *self = (Counter *)obj;
    if (!self->running) {
        return detach(self);
    }
    if (what != PyTrace_LINE) {
        return 0;
    }
    PyCodeObject *code = PyFrame_GetCode(frame); /* strong reference */
    int counted;
    if ((PyObject *)code == self->last_code) {
        counted = self->last_counted;
        Py_DECREF(code);
    }
    else {
        counted = decide(self, code);
        if (counted < 0) {
            Py_DECREF(code);
            return -1;
        }
        /* Keep the new code object before letting go of the old one: freeing
         * it may run Python code (weak reference callbacks). */
        PyObject *old = self->last_code;
        self->last_code = (PyObject *)code; /* takes our reference */
        self->last_counted = counted;
        Py_XDECREF(old);
        if (!self->running) { /* stopped while `counts` ran */
            return detach(self);
        }
    }
    if (!counted) {
        return 0;
    }
    if (self->steps < self->max_steps) {
        self->steps++;
        return 0;
    }
    return overflow(self);
}

/* ------------------------------------------------------------------ type */

static PyObject *
counter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"max_steps", "counts", "failure", NULL};
    long long max_steps;
    PyObject *counts, *failure;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "LOO:Counter", kwlist,
                                     &max_steps, &counts, &failure)) {
        return NULL;
    }
    if (max_steps < 0) {
        PyErr_Format(PyExc_ValueError, "max_steps must not be negative, not %lld", max_steps);
        return NULL;
    }
    if (!PyCallable_Check(counts) || !PyCallable_Check(failure)) {
        PyErr_SetString(PyExc_TypeError, "counts and failure must be callable");
        return NULL;
    }
    Counter *self = (Counter *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->decisions = PyDict_New();
    if (self->decisions == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->max_steps = max_steps;
    self->steps = 0;
    self->running = 0;
    Py_INCREF(counts);
    self->counts = counts;
    Py_INCREF(failure);
    self->failure = failure;
    self->last_code = NULL;
    self->last_counted = 0;
    self->saved = 0;
    self->saved_func = NULL;
    self->saved_obj = NULL;
    return (PyObject *)self;
}

static int
counter_traverse(Counter *self, visitproc visit, void *arg)
{
    Py_VISIT(self->counts);
    Py_VISIT(self->failure);
    Py_VISIT(self->decisions);
    Py_VISIT(self->last_code);
    Py_VISIT(self->saved_obj);
    return 0;
}

static int
counter_clear(Counter *self)
{
    Py_CLEAR(self->counts);
    Py_CLEAR(self->failure);
    Py_CLEAR(self->decisions);
    Py_CLEAR(self->last_code);
    Py_CLEAR(self->saved_obj);
    self->saved = 0;
    self->saved_func = NULL;
    return 0;
}

static void
counter_dealloc(Counter *self)
{
    PyObject_GC_UnTrack(self);
    counter_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Called as a Python trace function: put the C tracer in its place. */
static PyObject *
counter_call(Counter *self, PyObject *args, PyObject *kwds)
{
    PyObject *frame, *event, *arg;
    if (!PyArg_UnpackTuple(args, "Counter", 3, 3, &frame, &event, &arg)) {
        return NULL;
    }
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "Counter() takes no keyword arguments");
        return NULL;
    }
    int result = self->running ? set_trace(counter_trace, (PyObject *)self)
                               : set_trace(NULL, NULL);
    if (result < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
counter_start(Counter *self, PyObject *Py_UNUSED(ignored))
{
    if (self->running) {
        PyErr_SetString(PyExc_RuntimeError, "the step counter is already running");
        return NULL;
    }
    if (self->decisions == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the step counter was cleared");
        return NULL;
    }
    PyThreadState *tstate = PyThreadState_Get();
    Py_tracefunc saved_func = tstate->c_tracefunc;
    PyObject *saved_obj = tstate->c_traceobj;
    Py_XINCREF(saved_obj);
    PyDict_Clear(self->decisions);
    self->running = 1;
    if (set_trace(counter_trace, (PyObject *)self) < 0) {
        self->running = 0;
        Py_XDECREF(saved_obj);
        return NULL;
    }
    Py_XSETREF(self->saved_obj, saved_obj);
    self->saved_func = saved_func;
    self->saved = 1;
    Py_RETURN_NONE;
}

static PyObject *
counter_stop(Counter *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->running) {
        Py_RETURN_NONE;
    }
    self->running = 0;
    Py_tracefunc func = self->saved ? self->saved_func : NULL;
    PyObject *obj = self->saved_obj; /* our reference, released below */
    self->saved_obj = NULL;
    self->saved_func = NULL;
    self->saved = 0;
    Py_CLEAR(self->last_code);
    int result = set_trace(func, func == NULL ? NULL : obj);
    Py_XDECREF(obj);
    if (result < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
counter_get_steps(Counter *self, void *closure)
{
    return PyLong_FromLongLong(self->steps);
}

static PyObject *
counter_get_exceeded(Counter *self, void *closure)
{
    return PyBool_FromLong(self->steps > self->max_steps);
}

static PyObject *
counter_get_running(Counter *self, void *closure)
{
    return PyBool_FromLong(self->running);
}

static PyObject *
counter_get_max_steps(Counter *self, void *closure)
{
    return PyLong_FromLongLong(self->max_steps);
}

static PyMethodDef counter_methods[] = {
    {"start", (PyCFunction)counter_start, METH_NOARGS,
     "Count in the current thread, saving its trace function for stop()."},
    {"stop", (PyCFunction)counter_stop, METH_NOARGS,
     "Stop counting and put back the trace function start() found; other "
     "threads detach at their next trace event."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef counter_getset[] = {
    {"steps", (getter)counter_get_steps, NULL, "Line events counted so far.", NULL},
    {"exceeded", (getter)counter_get_exceeded, NULL, "Whether steps passed max_steps.", NULL},
    {"running", (getter)counter_get_running, NULL, "Between start() and stop().", NULL},
    {"max_steps", (getter)counter_get_max_steps, NULL, "The budget of line events.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CounterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "staal.worker._steps.Counter",
    .tp_doc = PyDoc_STR("Counter(max_steps, counts, failure): counts line events of "
                        "code whose co_filename counts(filename) accepts, with a C "
                        "trace function."),
    .tp_basicsize = sizeof(Counter),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = counter_new,
    .tp_dealloc = (destructor)counter_dealloc,
    .tp_traverse = (traverseproc)counter_traverse,
    .tp_clear = (inquiry)counter_clear,
    .tp_call = (ternaryfunc)counter_call,
    .tp_methods = counter_methods,
    .tp_getset = counter_getset,
};

static struct PyModuleDef steps_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "staal.worker._steps",
    .m_doc = "The C line counter behind staal.worker.limits.StepCounter.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__steps(void)
{
    if (PyType_Ready(&CounterType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&steps_module);
    if (module == NULL) {
        return NULL;
    }
    /* The largest max_steps: one more line event must still fit in steps. */
    PyObject *max_steps = PyLong_FromLongLong(LLONG_MAX - 1);
    if (max_steps == NULL
        || PyModule_AddObjectRef(module, "Counter", (PyObject *)&CounterType) < 0
        || PyModule_AddObjectRef(module, "MAX_STEPS", max_steps) < 0) {
        Py_XDECREF(max_steps);
        Py_DECREF(module);
        return NULL;
    }
    Py_DECREF(max_steps);
    return module;
}
