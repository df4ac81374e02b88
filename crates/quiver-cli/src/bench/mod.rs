//! `quiver bench` (owned by the bench work; stub).
