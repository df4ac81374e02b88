//! quiver: the public API.
