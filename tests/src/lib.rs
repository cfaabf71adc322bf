//! Helpers shared by the functional tests.
