//! What `cargo xtask` computes that is worth unit tests: the accuracy corpus's scoring.

#![deny(missing_docs)]

pub mod score;
