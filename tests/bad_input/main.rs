//! Bad input at every public entry point: each case feeds one fallible API
//! a bad input and checks for a typed error (variant and message naming the
//! op and the shapes or names involved) or a documented result, never a
//! panic. Cases run under `catch_unwind` (see `harness.rs`), so one panic
//! is reported with its case name and the rest still run.
//!
//! `BAD_INPUT_FILTER=<substring>` runs only the cases whose name contains it.

mod harness;
#[path = "../support/registry_ops.rs"]
mod registry_ops;

mod autograd;
mod axes;
mod broadcasting;
mod checkpoints;
mod constructors;
mod custom_ops;
mod digits_csv;
mod display;
mod dtypes;
mod expressions;
mod indexing;
mod layout;
mod mnist_csv;
mod modules;
mod nonfinite;
#[cfg(feature = "onnx")]
mod onnx;
mod optimizers;
mod reductions;
mod registry_sweep;
mod text;

use harness::Table;

#[test]
fn every_bad_input_gives_a_typed_error_or_a_documented_result() {
    let mut table = Table::default();
    constructors::cases(&mut table);
    broadcasting::cases(&mut table);
    dtypes::cases(&mut table);
    reductions::cases(&mut table);
    nonfinite::cases(&mut table);
    axes::cases(&mut table);
    indexing::cases(&mut table);
    layout::cases(&mut table);
    autograd::cases(&mut table);
    custom_ops::cases(&mut table);
    registry_sweep::cases(&mut table);
    optimizers::cases(&mut table);
    checkpoints::cases(&mut table);
    digits_csv::cases(&mut table);
    mnist_csv::cases(&mut table);
    modules::cases(&mut table);
    expressions::cases(&mut table);
    display::cases(&mut table);
    text::cases(&mut table);
    #[cfg(feature = "onnx")]
    onnx::cases(&mut table);
    let (n, failures) = table.run();
    assert!(
        failures.is_empty(),
        "{} of {n} bad-input cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("bad_input: {n} cases, all typed errors or documented results");
}
