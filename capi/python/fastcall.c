/*===- capi/python/fastcall.c - attnc._fastcall: the packed forward call --===*
 *
 * attnc.torch's eager forward without ctypes: a plan packs an
 * attnc_forward_call once per call shape (attnc/_torch_fast.py), and a
 * repeat call only changes five data pointers and the stream. ctypes costs
 * a few microseconds a call (argument conversion, a libffi call, a result
 * object); this module's one METH_FASTCALL function writes those words and
 * calls attnc_attention_forward_call directly.
 *
 * Built against the stable ABI (Py_LIMITED_API 3.10, the first with
 * METH_FASTCALL in it), so one build imports on every CPython >= 3.10: the
 * module built with one Python's headers runs on another's interpreter.
 * It links libattnc_c (found by its soname: the copy attnc/_lib.py loaded
 * first, or the one next to this module, rpath $ORIGIN).
 *
 *===----------------------------------------------------------------------===*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "attnc/attnc_c.h"

/* An int argument as a pointer-sized word (0 allowed); -1 with an
 * exception set where it is not an int. */
static int word_arg(PyObject *arg, void **word) {
  *word = PyLong_AsVoidPtr(arg);
  if (*word == NULL && PyErr_Occurred())
    return -1;
  return 0;
}

PyDoc_STRVAR(forward_call_doc,
             "forward_call(call, q, k, v, out, finals, stream) -> status\n\n"
             "Writes the data pointers q, k, v, out (and finals where the\n"
             "packed call has a finals tensor) into the attnc_tensor structs\n"
             "that the attnc_forward_call at address call points to, and\n"
             "stream into it, then calls attnc_attention_forward_call on it\n"
             "without the GIL. All arguments are ints; the result is the\n"
             "attnc_status (0 OK; the message is attnc_last_error's). A call\n"
             "address of 0 writes nothing (the C function refuses it).");

static PyObject *forward_call(PyObject *self, PyObject *const *args,
                              Py_ssize_t nargs) {
  (void)self;
  if (nargs != 7) {
    PyErr_Format(PyExc_TypeError,
                 "forward_call() takes 7 arguments (call, q, k, v, out, "
                 "finals, stream), got %zd",
                 nargs);
    return NULL;
  }
  void *words[7];
  for (Py_ssize_t i = 0; i < 7; ++i)
    if (word_arg(args[i], &words[i]) < 0)
      return NULL;
  attnc_forward_call *call = (attnc_forward_call *)words[0];
  if (call) {
    /* The plan's own buffers (attnc._fastpack): the pointers to them are
     * const for the C function's callers, the memory is writable. */
    ((attnc_tensor *)call->q)->data = words[1];
    ((attnc_tensor *)call->k)->data = words[2];
    ((attnc_tensor *)call->v)->data = words[3];
    ((attnc_tensor *)call->out)->data = words[4];
    if (call->finals)
      ((attnc_tensor *)call->finals)->data = words[5];
    call->stream = words[6];
  }
  attnc_status status;
  /* As ctypes does: another thread may run Python meanwhile. The plan's
   * buffers are per thread (attnc/_torch_fast.py), so none rewrites them. */
  Py_BEGIN_ALLOW_THREADS
  status = attnc_attention_forward_call(call);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong((long)status);
}

static PyMethodDef methods[] = {
    {"forward_call", (PyCFunction)(void (*)(void))forward_call, METH_FASTCALL,
     forward_call_doc},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "attnc._fastcall",
    "attnc.torch's packed forward call without ctypes (capi/python).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL};

PyMODINIT_FUNC PyInit__fastcall(void) {
  PyObject *m = PyModule_Create(&module);
  if (!m)
    return NULL;
  if (PyModule_AddIntConstant(m, "ABI_VERSION", attnc_abi_version()) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
