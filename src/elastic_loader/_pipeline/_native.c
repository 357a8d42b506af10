/* Packing's compiled steps (the package's only C; optional: numpy does the same without it).

   gather(values, chunk, lo, sizes, out, eos) writes document i (sizes[i] - 1 tokens, starting
   at lo[i] of values[chunk[i]], or of values[0] when chunk is None) and then eos, for every i in
   order, filling out exactly: a split's documents copied out of a read into its stream
   (_documents.Fetched.copy_into).

   doc_ids(starts, out, length) writes the doc_ids of k blocks of length tokens (out is k x length):
   in each row, how many of the sorted document starts lie at offsets 1..j of it (_packing._doc_ids).

   Every argument is checked before anything is written (a ValueError says what is wrong), and
   the writing runs without the GIL. tests/pipeline/packing/test_pipe_gather.py compares both with
   their numpy counterparts. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* A C-contiguous buffer of 8-byte signed integers (numpy's int64), read-only or writable. */
static int
int64_buffer(PyObject *obj, Py_buffer *view, int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        return -1;
    }
    const char *format = view->format ? view->format : "B";
    if (format[0] == '<' || format[0] == '=' || format[0] == '@') {
        format++;
    }
    if (view->itemsize != 8 || (strcmp(format, "q") != 0 && strcmp(format, "l") != 0)) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous int64 array", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Whether document i (from slot at of out, nout slots) lies inside its batch and inside out. */
static int
document_fits(const Py_buffer *chunks, Py_ssize_t nchunks, const int64_t *chunk_p, const int64_t *lo_p,
              const int64_t *size_p, Py_ssize_t i, int64_t at, int64_t nout)
{
    int64_t c = chunk_p ? chunk_p[i] : 0, size = size_p[i], start = lo_p[i];
    if (c < 0 || c >= nchunks || size < 1 || start < 0) {
        return 0;
    }
    /* size - 1 tokens from start, then EOS: no sum below can overflow, every term is >= 0 */
    return start <= (int64_t)(chunks[c].len / 8) - (size - 1) && size <= nout - at;
}

static PyObject *
gather(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *values_seq, *chunk_obj, *lo_obj, *sizes_obj, *out_obj;
    long long eos;
    if (!PyArg_ParseTuple(args, "OOOOOL", &values_seq, &chunk_obj, &lo_obj, &sizes_obj, &out_obj, &eos)) {
        return NULL;
    }
    PyObject *values_fast = PySequence_Fast(values_seq, "values must be a sequence of int64 arrays");
    if (values_fast == NULL) {
        return NULL;
    }
    /* zeroed views: PyBuffer_Release does nothing to a view that was never filled */
    Py_ssize_t nchunks = PySequence_Fast_GET_SIZE(values_fast);
    Py_buffer *chunks = PyMem_Calloc(nchunks > 0 ? (size_t)nchunks : 1, sizeof(Py_buffer));
    Py_buffer chunk = {0}, lo = {0}, sizes = {0}, out = {0};
    PyObject *result = NULL;
    if (chunks == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (nchunks < 1) {
        PyErr_SetString(PyExc_ValueError, "values must hold at least one array");
        goto done;
    }
    for (Py_ssize_t j = 0; j < nchunks; j++) {
        if (int64_buffer(PySequence_Fast_GET_ITEM(values_fast, j), &chunks[j], 0, "each values array") < 0) {
            goto done;
        }
    }
    int have_chunk = chunk_obj != Py_None;
    if ((have_chunk && int64_buffer(chunk_obj, &chunk, 0, "chunk") < 0) || int64_buffer(lo_obj, &lo, 0, "lo") < 0
        || int64_buffer(sizes_obj, &sizes, 0, "sizes") < 0 || int64_buffer(out_obj, &out, 1, "out") < 0) {
        goto done;
    }
    Py_ssize_t n = lo.len / 8;
    if (sizes.len / 8 != n || (have_chunk && chunk.len / 8 != n)) {
        PyErr_SetString(PyExc_ValueError, "lo, sizes and chunk must have one entry a document");
        goto done;
    }
    const int64_t *lo_p = lo.buf, *size_p = sizes.buf, *chunk_p = have_chunk ? chunk.buf : NULL;
    int64_t nout = (int64_t)(out.len / 8), at = 0;
    Py_ssize_t bad = -1;
    for (Py_ssize_t i = 0; i < n && bad < 0; i++) { /* check everything before writing anything */
        if (document_fits(chunks, nchunks, chunk_p, lo_p, size_p, i, at, nout)) {
            at += size_p[i];
        } else {
            bad = i;
        }
    }
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "document %zd lies outside its values or past the end of out", bad);
        goto done;
    }
    if (at != nout) {
        PyErr_Format(PyExc_ValueError, "the documents fill %lld slots of out, which has %lld", (long long)at,
                     (long long)nout);
        goto done;
    }
    int64_t *dst = out.buf;
    Py_BEGIN_ALLOW_THREADS
    at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* checked again, cheaply: the arrays are the caller's, and the GIL is released */
        if (!document_fits(chunks, nchunks, chunk_p, lo_p, size_p, i, at, nout)) {
            bad = i;
            break;
        }
        int64_t tokens = size_p[i] - 1;
        memcpy(dst + at, (const int64_t *)chunks[chunk_p ? chunk_p[i] : 0].buf + lo_p[i],
               (size_t)tokens * sizeof(int64_t));
        at += tokens;
        dst[at++] = (int64_t)eos;
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "document %zd changed while it was copied", bad);
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&lo);
    PyBuffer_Release(&chunk);
    if (chunks != NULL) {
        for (Py_ssize_t j = 0; j < nchunks; j++) {
            PyBuffer_Release(&chunks[j]);
        }
        PyMem_Free(chunks);
    }
    Py_DECREF(values_fast);
    return result;
}

static PyObject *
doc_ids(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *starts_obj, *out_obj;
    Py_ssize_t length;
    if (!PyArg_ParseTuple(args, "OOn", &starts_obj, &out_obj, &length)) {
        return NULL;
    }
    Py_buffer starts = {0}, out = {0};
    PyObject *result = NULL;
    if (int64_buffer(starts_obj, &starts, 0, "starts") < 0 || int64_buffer(out_obj, &out, 1, "out") < 0) {
        goto done;
    }
    Py_ssize_t n = starts.len / 8, total = out.len / 8;
    if (length < 1 || total % length != 0) {
        PyErr_Format(PyExc_ValueError, "out holds %zd slots, not whole blocks of %zd", total, length);
        goto done;
    }
    const int64_t *start = starts.buf;
    for (Py_ssize_t i = 0; i < n; i++) { /* ascending, distinct, inside out */
        if (start[i] < 0 || start[i] >= total || (i > 0 && start[i] <= start[i - 1])) {
            PyErr_Format(PyExc_ValueError, "document start %zd is out of order or outside the blocks", i);
            goto done;
        }
    }
    int64_t *dst = out.buf;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t next = 0;
    for (Py_ssize_t row = 0; row < total; row += length) {
        int64_t count = 0;
        Py_ssize_t at = row, end = row + length;
        if (next < n && start[next] == row) { /* a start at a block's offset 0 counts for nothing */
            next++;
        }
        while (next < n && start[next] < end) {
            Py_ssize_t upto = (Py_ssize_t)start[next];
            for (; at < upto; at++) {
                dst[at] = count;
            }
            count++;
            next++;
        }
        for (; at < end; at++) {
            dst[at] = count;
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&starts);
    return result;
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS,
     "gather(values, chunk, lo, sizes, out, eos): copy documents, each followed by eos, into out."},
    {"doc_ids", doc_ids, METH_VARARGS,
     "doc_ids(starts, out, length): the doc_ids of out's blocks of length tokens from sorted starts."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "Packing's compiled steps: gather and doc_ids.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModule_Create(&module);
}
