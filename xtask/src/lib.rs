//! What `cargo xtask` computes that is worth unit tests: the accuracy corpus's scoring.

pub mod score;
