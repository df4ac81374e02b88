//! quiver-transport: moving bytes between processes.
