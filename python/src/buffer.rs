//! The buffer protocol without a copy: a contiguous view of any object that exports one
//! (bytes, bytearray, memoryview, array.array, numpy arrays...), read-only or writable.
//!
//! PyO3 offers the buffer protocol only where the limited API has it (CPython 3.11 on);
//! these wheels are abi3 for CPython 3.9 on, so the two functions and the `Py_buffer`
//! layout (unchanged since CPython 3.0, and part of the stable ABI from 3.11) are declared
//! here. Every CPython this module loads into exports both functions.

use std::ffi::{c_char, c_int, c_void};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi::{PyObject, Py_ssize_t};
use pyo3::prelude::*;

/// `Py_buffer`, as CPython lays it out.
#[repr(C)]
struct RawBuffer {
    buf: *mut c_void,
    obj: *mut PyObject,
    len: Py_ssize_t,
    itemsize: Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut Py_ssize_t,
    strides: *mut Py_ssize_t,
    suboffsets: *mut Py_ssize_t,
    internal: *mut c_void,
}

/// `PyBUF_SIMPLE`: a contiguous run of bytes, no format, no shape.
const PYBUF_SIMPLE: c_int = 0;
/// `PyBUF_WRITABLE`.
const PYBUF_WRITABLE: c_int = 0x0001;

extern "C" {
    fn PyObject_GetBuffer(obj: *mut PyObject, view: *mut RawBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut RawBuffer);
}

/// A contiguous buffer exported by a Python object, released on drop. Not `Send`: it is
/// created and dropped where the GIL is held; a call that releases the GIL lends only its
/// bytes to the closure that runs without it.
pub(crate) struct Exported {
    view: Box<RawBuffer>,
}

impl Exported {
    /// A read-only view of `obj`'s bytes.
    ///
    /// # Errors
    /// `BufferError`/`TypeError` when `obj` has no buffer or a non-contiguous one.
    pub(crate) fn readable(obj: &Bound<'_, PyAny>) -> PyResult<Exported> {
        Exported::get(obj, PYBUF_SIMPLE)
    }

    /// A writable view of `obj`'s bytes.
    ///
    /// # Errors
    /// As [`Exported::readable`], and `BufferError` for a read-only object (bytes).
    pub(crate) fn writable(obj: &Bound<'_, PyAny>) -> PyResult<Exported> {
        Exported::get(obj, PYBUF_SIMPLE | PYBUF_WRITABLE)
    }

    fn get(obj: &Bound<'_, PyAny>, flags: c_int) -> PyResult<Exported> {
        // SAFETY: RawBuffer is plain data (pointers and integers): all zeros is a valid value.
        let mut view: Box<RawBuffer> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `obj` is a live object and the GIL is held (we have a Bound); `view`
        // points at a RawBuffer laid out as CPython's Py_buffer.
        let rc = unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) };
        if rc != 0 {
            return Err(PyErr::take(obj.py())
                .unwrap_or_else(|| PyBufferError::new_err("the object exports no buffer")));
        }
        if view.buf.is_null() && view.len != 0 {
            // SAFETY: the view was filled by a successful PyObject_GetBuffer.
            unsafe { PyBuffer_Release(&mut *view) };
            return Err(PyBufferError::new_err("the object exported a NULL buffer"));
        }
        Ok(Exported { view })
    }

    /// The bytes, valid while `self` lives.
    pub(crate) fn bytes(&self) -> &[u8] {
        if self.view.len <= 0 {
            return &[];
        }
        // SAFETY: a successful PyObject_GetBuffer with PyBUF_SIMPLE gives `len` contiguous
        // bytes at `buf` (non-NULL, checked in `get`), kept alive by the export until
        // PyBuffer_Release; the slice borrows `self`, which releases it only when dropped.
        unsafe { std::slice::from_raw_parts(self.view.buf.cast::<u8>(), self.view.len as usize) }
    }

    /// The bytes, writable, valid while `self` lives.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        if self.view.len <= 0 {
            return &mut [];
        }
        // SAFETY: as in `bytes`, and the view was asked for with PyBUF_WRITABLE (only
        // `writable` creates views this method is called on), so the exporter allows
        // writing; `&mut self` makes this the one slice of it.
        unsafe {
            std::slice::from_raw_parts_mut(self.view.buf.cast::<u8>(), self.view.len as usize)
        }
    }
}

impl Drop for Exported {
    fn drop(&mut self) {
        // SAFETY: the view came from a successful PyObject_GetBuffer and is released once,
        // with the GIL held: `Exported` is not `Send`, so it never enters a closure that
        // runs without the GIL, and it was created where the GIL was held.
        unsafe { PyBuffer_Release(&mut *self.view) };
    }
}
