//! The book's chapters as doctests.
//!
//! The user's guide is an mdBook under `docs/` (`docs/src/SUMMARY.md` lists
//! the chapters). Each chapter is included here as the documentation of one
//! item, so `cargo test --doc -p retrograd` compiles and runs every Rust
//! snippet in the book: a snippet that no longer compiles, or whose
//! assertions no longer hold, fails the tests instead of misleading a reader.
//! Shell commands and program output in the chapters are fenced as `sh` or
//! `text`, which rustdoc does not run. This module exists only under
//! `cfg(doctest)`; a chapter whose snippets need a feature (`onnx`, `chat`)
//! is tested when that feature is on, as it is by default.

/// docs/src/introduction.md
#[doc = include_str!("../docs/src/introduction.md")]
pub struct Introduction;

/// docs/src/job-digits.md
#[doc = include_str!("../docs/src/job-digits.md")]
pub struct JobDigits;

/// docs/src/job-mnist-cnn.md
#[doc = include_str!("../docs/src/job-mnist-cnn.md")]
pub struct JobMnistCnn;

/// docs/src/job-shakespeare.md
#[doc = include_str!("../docs/src/job-shakespeare.md")]
pub struct JobShakespeare;

/// docs/src/job-semantic-search.md
#[doc = include_str!("../docs/src/job-semantic-search.md")]
pub struct JobSemanticSearch;

/// docs/src/job-chat.md
#[doc = include_str!("../docs/src/job-chat.md")]
pub struct JobChat;

/// docs/src/job-lora.md
#[doc = include_str!("../docs/src/job-lora.md")]
pub struct JobLora;

/// docs/src/serve.md
#[doc = include_str!("../docs/src/serve.md")]
pub struct Serve;

/// docs/src/training.md
#[doc = include_str!("../docs/src/training.md")]
pub struct Training;

/// docs/src/func.md
#[doc = include_str!("../docs/src/func.md")]
pub struct FunctionTransforms;

/// docs/src/resuming.md
#[doc = include_str!("../docs/src/resuming.md")]
pub struct Resuming;

/// docs/src/distributed.md
#[doc = include_str!("../docs/src/distributed.md")]
pub struct Distributed;

/// docs/src/onnx.md
#[cfg(feature = "onnx")]
#[doc = include_str!("../docs/src/onnx.md")]
pub struct Onnx;

/// docs/src/hub.md
#[cfg(feature = "chat")]
#[doc = include_str!("../docs/src/hub.md")]
pub struct Hub;

/// docs/src/pictures.md
#[doc = include_str!("../docs/src/pictures.md")]
pub struct Pictures;

/// docs/src/ops.md
#[doc = include_str!("../docs/src/ops.md")]
pub struct Ops;

/// docs/src/reliability.md
#[doc = include_str!("../docs/src/reliability.md")]
pub struct Reliability;

/// docs/src/performance.md
#[doc = include_str!("../docs/src/performance.md")]
pub struct Performance;
