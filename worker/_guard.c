/* staal.worker._guard: how a worker says, as it dies, that its memory limit
 * killed it.
 *
 * DESIGN.md section 4 ("Limits"). A run's memory is bounded by RLIMIT_DATA
 * (staal.worker.limits.memory_limit). Python turns a refused allocation into
 * a MemoryError, which fails the run as `budget` in the worker; C code (a
 * library called through ffi.c, an extension, the interpreter's own fatal
 * errors) may instead crash on the NULL it got, or abort. Such a death says
 * nothing by itself, and a crash is resumed, so a program over its limit
 * would be run again and again.
 *
 * arm(probe_bytes, exit_code) installs a handler for SIGSEGV, SIGBUS and
 * SIGABRT that asks the kernel for `probe_bytes` more of private writable
 * memory, which RLIMIT_DATA counts: refused (ENOMEM), the process was
 * within `probe_bytes` of its limit when it crashed, and it exits with
 * `exit_code` (staal.budgets.MEMORY_EXIT_CODE), which the supervisor reads
 * as the run failing its memory limit. Granted, the memory is given back,
 * the signal's default action is restored and the signal raised again, so
 * the process dies by it as it would have. Everything the handler calls
 * (mmap, munmap, sigaction, raise, _exit) is a system call safe in a signal
 * handler; it runs on its own stack, so a crash that exhausted the stack
 * still reaches it.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t probe_bytes;
static int exit_code;
static const int fatal[] = {SIGSEGV, SIGBUS, SIGABRT};

static void
on_fatal(int signum)
{
    int saved = errno;
    void *probe = mmap(NULL, probe_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe == MAP_FAILED && errno == ENOMEM)
        _exit(exit_code);
    if (probe != MAP_FAILED)
        munmap(probe, probe_bytes);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(signum, &dfl, NULL);
    errno = saved;
    raise(signum);  /* delivered when this handler returns: the process dies by it */
}

static PyObject *
guard_arm(PyObject *module, PyObject *args)
{
    Py_ssize_t probe;
    int code;
    if (!PyArg_ParseTuple(args, "ni:arm", &probe, &code))
        return NULL;
    if (probe <= 0) {
        PyErr_SetString(PyExc_ValueError, "probe_bytes must be positive");
        return NULL;
    }
    static char *alt_stack = NULL;
    if (alt_stack == NULL) {
        size_t size = 64 * 1024;
        alt_stack = malloc(size);
        if (alt_stack == NULL)
            return PyErr_NoMemory();
        stack_t ss;
        ss.ss_sp = alt_stack;
        ss.ss_size = size;
        ss.ss_flags = 0;
        if (sigaltstack(&ss, NULL) != 0)
            return PyErr_SetFromErrno(PyExc_OSError);
    }
    probe_bytes = (size_t)probe;
    exit_code = code;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_fatal;
    action.sa_flags = SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) {
        if (sigaction(fatal[i], &action, NULL) != 0)
            return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyMethodDef guard_methods[] = {
    {"arm", guard_arm, METH_VARARGS,
     "arm(probe_bytes, exit_code): on SIGSEGV, SIGBUS or SIGABRT, exit with exit_code if "
     "probe_bytes more memory cannot be had, else die by the signal."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef guard_module = {
    PyModuleDef_HEAD_INIT,
    "staal.worker._guard",
    "The memory limit's last word: a crash at the limit exits with a code that says so.",
    -1,
    guard_methods,
};

PyMODINIT_FUNC
PyInit__guard(void)
{
    return PyModule_Create(&guard_module);
}
