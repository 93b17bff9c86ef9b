//! Builds the fake CUDA for the integration tests (fixtures are built, never checked in).
#[path = "fake-cuda/builder.rs"]
mod builder;

fn main() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fake-cuda");
    println!("cargo:rerun-if-changed={}", src.display());
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("fake-cuda");
    if let Err(e) = builder::build_fake_cuda(&src, &out) {
        panic!("building the fake CUDA: {e}");
    }
    println!("cargo:rustc-env=FAKE_CUDA_DIR={}", out.display());
}
