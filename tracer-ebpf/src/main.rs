//! gputrace's kernel side. Data flows one way: these programs filter to the traced process
//! tree, count launches per thread in `THREADS`, time the other CUDA calls and write one
//! record per call to `EVENTS`; user space reads both. Every loss is counted in `LOSS`.
#![no_std]
#![no_main]
// `${concat(..)}` names each uprobe program's multi-link copy (`probes::uprobe_pair!`).
#![feature(macro_metavar_expr_concat)]

mod maps;
mod probes;
mod python_frames;
mod stack_copy;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any program that could reach a panic; this is never executed.
    loop {}
}

#[unsafe(no_mangle)]
#[unsafe(link_section = "license")]
static LICENSE: [u8; 4] = *b"GPL\0";
