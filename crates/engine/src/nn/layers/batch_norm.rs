//! [`BatchNorm1d`] and [`BatchNorm2d`]: batch normalisation with a learnable
//! per-channel scale and shift and running statistics kept as buffers.

use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::nn::setters::setters;
use crate::nn::{join_name, Buffer, Forward, Module, Parameter};
use crate::ops::nn::batch_norm_running::BatchNormRunningStats;
use crate::ops::nn::BatchNormArgs;
use crate::tensor::{DType, Tensor};

/// The options of [`BatchNorm1d`] and [`BatchNorm2d`], PyTorch's defaults:
/// `eps = 1e-5`, `momentum = Some(0.1)` (`None`: a cumulative moving
/// average, `1 / num_batches_tracked`), `affine = true`,
/// `track_running_stats = true`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormOptions {
    /// Added to the variance inside the square root.
    pub eps: f64,
    /// The running-statistics update factor; `None` for a cumulative average.
    pub momentum: Option<f64>,
    /// A learnable weight (ones) and bias (zeros).
    pub affine: bool,
    /// Keep running statistics (buffers) for eval mode; without them eval
    /// mode uses batch statistics too.
    pub track_running_stats: bool,
}

impl Default for BatchNormOptions {
    fn default() -> Self {
        BatchNormOptions {
            eps: 1e-5,
            momentum: Some(0.1),
            affine: true,
            track_running_stats: true,
        }
    }
}

setters! {
    impl BatchNormOptions {
        /// Sets `eps`.
        eps(eps: f64);
        /// Sets `momentum` (`None`: cumulative moving average).
        momentum(momentum: Option<f64>);
        /// Sets `affine`.
        affine(affine: bool);
        /// Sets `track_running_stats`.
        track_running_stats(track_running_stats: bool);
    }
}

/// The running statistics of a batch norm.
#[derive(Clone, Debug)]
struct Running {
    mean: Buffer,
    var: Buffer,
    /// A 0-d f64 tensor (retrograd has no integer tensors yet; PyTorch's is int64).
    num_batches_tracked: Buffer,
}

/// What `BatchNorm1d` and `BatchNorm2d` share.
#[derive(Clone, Debug)]
struct BatchNormCore {
    name: &'static str,
    /// Accepted input ranks.
    ranks: &'static [usize],
    num_features: usize,
    options: BatchNormOptions,
    weight: Option<Parameter>,
    bias: Option<Parameter>,
    running: Option<Running>,
    training: bool,
}

impl BatchNormCore {
    fn new(
        name: &'static str,
        ranks: &'static [usize],
        num_features: usize,
        options: BatchNormOptions,
        dtype: DType,
    ) -> Result<Self> {
        if !(options.eps.is_finite() && options.eps >= 0.0) {
            return Err(Error::invalid(
                name,
                format!("eps must be finite and >= 0, got {}", options.eps),
            ));
        }
        if let Some(m) = options.momentum
            && !(0.0..=1.0).contains(&m)
        {
            return Err(Error::invalid(
                name,
                format!("momentum must be in [0, 1], got {m}"),
            ));
        }
        let c = [num_features];
        let (weight, bias) = if options.affine {
            (
                Some(Parameter::new(Tensor::ones(&c, dtype)?)),
                Some(Parameter::new(Tensor::zeros(&c, dtype)?)),
            )
        } else {
            (None, None)
        };
        let running = options
            .track_running_stats
            .then(|| -> Result<Running> {
                Ok(Running {
                    mean: Buffer::new(Tensor::zeros(&c, dtype)?),
                    var: Buffer::new(Tensor::ones(&c, dtype)?),
                    num_batches_tracked: Buffer::new(Tensor::scalar(0.0)),
                })
            })
            .transpose()?;
        Ok(BatchNormCore {
            name,
            ranks,
            num_features,
            options,
            weight,
            bias,
            running,
            training: true,
        })
    }

    /// PyTorch's `_BatchNorm.forward`.
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        if !self.ranks.contains(&x.shape().len()) {
            return Err(Error::invalid(
                self.name,
                format!(
                    "expected an input of rank {} ({}), got shape {:?}",
                    self.ranks
                        .iter()
                        .map(|r| r.to_string())
                        .collect::<Vec<_>>()
                        .join(" or "),
                    if self.ranks.contains(&4) {
                        "[N, C, H, W]"
                    } else {
                        "[N, C] or [N, C, L]"
                    },
                    x.shape()
                ),
            ));
        }
        let graph = x.graph();
        let weight = self.weight.as_ref().map(|w| graph.param(w));
        let bias = self.bias.as_ref().map(|b| graph.param(b));
        let mut args = BatchNormArgs::new().eps(self.options.eps);
        args.weight = weight.as_ref();
        args.bias = bias.as_ref();
        let Some(running) = &self.running else {
            // No running statistics: batch statistics in both modes.
            return Ok(x.try_batch_norm(&args)?.output);
        };
        let (mean, var) = (running.mean.value(), running.var.value());
        if graph.is_capturing() {
            // Both modes read the statistics again at every run, not as constants.
            for (name, buffer, now) in [
                ("running_mean", &running.mean, &mean),
                ("running_var", &running.var, &var),
            ] {
                let read = buffer.clone();
                graph.capture_state(name, now, move || read.value());
            }
            if self.training {
                return self.captured_training(x, &args, running, &mean, &var);
            }
        }
        if !self.training {
            return Ok(x
                .try_batch_norm(&args.running(&mean, &var).training(false))?
                .output);
        }
        let tracked = running.num_batches_tracked.value().try_item()? + 1.0;
        let factor = self.options.momentum.unwrap_or(1.0 / tracked);
        let out = x.try_batch_norm(&args.running(&mean, &var).momentum(factor))?;
        let (Some(new_mean), Some(new_var)) = (out.running_mean, out.running_var) else {
            unreachable!("training with running statistics returns them updated")
        };
        // All three only after the forward succeeded.
        running.mean.set(new_mean)?;
        running.var.set(new_var)?;
        running.num_batches_tracked.set(Tensor::scalar(tracked))?;
        Ok(out.output)
    }

    /// Training mode in a compiled step: the running statistics' update is
    /// a node of the captured graph (`batch_norm_running_stats`, the eager
    /// update's bits), written back to the buffers after every run (a
    /// state update), and `num_batches_tracked` counts up after every run.
    fn captured_training<'g>(
        &self,
        x: &Var<'g>,
        args: &BatchNormArgs<'_, 'g>,
        running: &Running,
        mean: &Tensor,
        var: &Tensor,
    ) -> Result<Var<'g>> {
        let graph = x.graph();
        let output = x.try_batch_norm(args)?.output;
        let mut inputs = vec![
            x.clone(),
            graph.constant(mean.clone()),
            graph.constant(var.clone()),
        ];
        if self.options.momentum.is_none() {
            // The cumulative average's factor depends on the count, read at every run.
            let tracked = running.num_batches_tracked.value().reshape(&[1])?;
            let read = running.num_batches_tracked.clone();
            graph.capture_state("num_batches_tracked", &tracked, move || {
                let now = read.value();
                now.reshape(&[1]).unwrap_or(now)
            });
            inputs.push(graph.constant(tracked));
        }
        let refs: Vec<&Var<'g>> = inputs.iter().collect();
        let stats = graph.record(BatchNormRunningStats::new(self.options.momentum), &refs)?;
        let (m, v) = (running.mean.clone(), running.var.clone());
        graph.capture_update(
            &format!("{} running statistics", self.name),
            &stats,
            move |t| {
                m.set(t.select(0, 0)?.contiguous())?;
                v.set(t.select(0, 1)?.contiguous())
            },
        );
        let tracked = running.num_batches_tracked.clone();
        graph.capture_effect(
            &format!("{} num_batches_tracked += 1", self.name),
            move || {
                let next = tracked.value().try_item()? + 1.0;
                tracked.set(Tensor::scalar(next))
            },
        );
        Ok(output)
    }

    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        if let Some(w) = &self.weight {
            f(&join_name(prefix, "weight"), w);
        }
        if let Some(b) = &self.bias {
            f(&join_name(prefix, "bias"), b);
        }
    }

    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        if let Some(r) = &self.running {
            f(&join_name(prefix, "running_mean"), &r.mean);
            f(&join_name(prefix, "running_var"), &r.var);
            f(
                &join_name(prefix, "num_batches_tracked"),
                &r.num_batches_tracked,
            );
        }
    }
}

macro_rules! batch_norm_module {
    ($(#[$doc:meta])* $name:ident, $label:literal, $ranks:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $name(BatchNormCore);

        impl $name {
            /// A batch norm over `num_features` channels with PyTorch's
            /// defaults ([`BatchNormOptions::default`]): weight ones, bias
            /// zeros, running mean zeros, running variance ones.
            pub fn new(num_features: usize, dtype: DType) -> Result<Self> {
                Self::with_options(num_features, BatchNormOptions::default(), dtype)
            }

            /// A batch norm with the given options. Errors: a negative or
            /// non-finite `eps`, a momentum outside `[0, 1]`.
            pub fn with_options(num_features: usize, options: BatchNormOptions, dtype: DType) -> Result<Self> {
                BatchNormCore::new($label, $ranks, num_features, options, dtype).map($name)
            }

            /// The number of channels.
            pub fn num_features(&self) -> usize {
                self.0.num_features
            }

            /// The options.
            pub fn options(&self) -> BatchNormOptions {
                self.0.options
            }

            /// The per-channel scale, if affine.
            pub fn weight(&self) -> Option<&Parameter> {
                self.0.weight.as_ref()
            }

            /// The per-channel shift, if affine.
            pub fn bias(&self) -> Option<&Parameter> {
                self.0.bias.as_ref()
            }

            /// The running mean, if tracked.
            pub fn running_mean(&self) -> Option<&Buffer> {
                self.0.running.as_ref().map(|r| &r.mean)
            }

            /// The running (unbiased) variance, if tracked.
            pub fn running_var(&self) -> Option<&Buffer> {
                self.0.running.as_ref().map(|r| &r.var)
            }

            /// The number of training batches seen, if tracked: a 0-d f64
            /// tensor (retrograd has no integer tensors yet; PyTorch keeps an int64).
            pub fn num_batches_tracked(&self) -> Option<&Buffer> {
                self.0.running.as_ref().map(|r| &r.num_batches_tracked)
            }

            /// Whether the module is in training mode (the default).
            pub fn is_training(&self) -> bool {
                self.0.training
            }
        }

        impl Forward for $name {
            fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
                self.0.forward(x)
            }
        }

        impl Module for $name {
            fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
                self.0.visit_parameters(prefix, f)
            }
            fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
                self.0.visit_buffers(prefix, f)
            }
            fn set_training(&mut self, training: bool) {
                self.0.training = training;
            }
        }
    };
}

batch_norm_module!(
    /// PyTorch's `nn.BatchNorm1d`: batch normalisation of `[N, C]` or
    /// `[N, C, L]` inputs per channel (see
    /// [`Var::try_batch_norm`](crate::Var::try_batch_norm)). In training
    /// mode (the default) it normalises with the batch statistics and
    /// updates the running statistics (buffers `running_mean`,
    /// `running_var`, `num_batches_tracked`) as PyTorch does; after
    /// `set_training(false)` it normalises with the running statistics.
    ///
    /// ```
    /// use retrograd::{DType, Graph, Tensor, nn::{BatchNorm1d, Forward, Module}};
    /// let mut bn = BatchNorm1d::new(2, DType::F64)?;
    /// let g = Graph::new();
    /// let x = g.constant(Tensor::from_vec(vec![1.0, 2.0, 3.0, 6.0], &[2, 2])?);
    /// let y = bn.forward(&x)?.value().to_f64_vec();
    /// assert!((y[0] + 1.0).abs() < 1e-4 && (y[2] - 1.0).abs() < 1e-4);
    /// // running_mean = 0.9 * 0 + 0.1 * [2, 4]
    /// let rm = bn.running_mean().unwrap().value().to_f64_vec();
    /// assert!((rm[0] - 0.2).abs() < 1e-15 && (rm[1] - 0.4).abs() < 1e-15);
    /// bn.set_training(false); // now the running statistics are used
    /// let names: Vec<String> = bn.state_dict().into_keys().collect();
    /// assert_eq!(names, ["bias", "num_batches_tracked", "running_mean", "running_var", "weight"]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    BatchNorm1d,
    "BatchNorm1d",
    &[2, 3]
);

batch_norm_module!(
    /// PyTorch's `nn.BatchNorm2d`: batch normalisation of `[N, C, H, W]`
    /// inputs per channel, with running statistics as buffers; see
    /// [`BatchNorm1d`] for the modes.
    ///
    /// ```
    /// use retrograd::{DType, Graph, Tensor, nn::{BatchNorm2d, Forward, Module}};
    /// let bn = BatchNorm2d::new(3, DType::F32)?;
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::randn(&[4, 3, 5, 5], DType::F32, 7)?);
    /// let y = bn.forward(&x)?;
    /// assert_eq!(y.shape(), &[4, 3, 5, 5]);
    /// assert_eq!(bn.num_batches_tracked().unwrap().value().try_item()?, 1.0);
    /// assert!(bn.forward(&g.variable(Tensor::randn(&[4, 3], DType::F32, 7)?)).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    BatchNorm2d,
    "BatchNorm2d",
    &[4]
);
