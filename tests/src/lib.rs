//! Black-box tests of the real edgehook component live in `tests/`.
