//! The two macros behind every fused "slope" backward helper: an
//! elementwise op `f` whose backward is `h(g, x) = g * f'(x)` computed in
//! one kernel pass ([`unary_with_slope!`]), and the helper itself, made
//! differentiable again ([`slope_helper!`]). The items they use
//! (`Differentiable`, `kernels`, `unbroadcast`, `sum_tangents`, ...) must be
//! in scope where they are invoked.

/// Implements `Differentiable` for a fused backward helper `h(g, x) = g * f'(x)`
/// of an elementwise `f`, computed by the binary functor `$functor`.
///
/// Being linear in `g`, its gradient for `g` is the helper itself. For `x` it
/// is `a * g * f''(x)` with `a` the incoming gradient, which `$curvature`
/// returns as `Option<Result<Var>>` (`None` when `f` is piecewise linear).
/// The Jacobian is diagonal, so the tangent rule reuses both with `a` the
/// tangent.
macro_rules! slope_helper {
    ($op:ty, $name:literal, |$s:ident| $functor:expr,
     |$cs:ident, $a:ident, $g:ident, $x:ident| $curvature:expr) => {
        impl $op {
            /// `h(g, x)` for one element: what the helper's kernel computes
            /// per element, for the op's scalar lane (an error where building
            /// the kernel's functor is, e.g. invalid clamp bounds).
            #[inline(always)]
            #[allow(dead_code)]
            pub(crate) fn slope_at<T: crate::Element>(&self, g: T, x: T) -> Result<T> {
                let $s = self;
                Ok(crate::kernels::functors::BinaryFn::call($functor, g, x))
            }
        }

        impl Differentiable for $op {
            fn name(&self) -> &str {
                $name
            }
            fn arity(&self) -> Option<usize> {
                Some(2)
            }
            fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
                expect_inputs($name, inputs, 2)?;
                let $s = self;
                kernels::zip($name, inputs[0], inputs[1], $functor)
            }
            fn backward<'g>(
                &self,
                g2: &Var<'g>,
                inputs: &[Var<'g>],
                _out: &Var<'g>,
            ) -> Result<GradInputs<'g>> {
                let (g, x) = (&inputs[0], &inputs[1]);
                let dg = g
                    .requires_grad()
                    .then(|| unbroadcast(g.graph().record(self.clone(), &[g2, x])?, g))
                    .transpose()?;
                let dx = if x.requires_grad() {
                    let curvature = |$cs: &Self,
                                     $a: &Var<'g>,
                                     $g: &Var<'g>,
                                     $x: &Var<'g>|
                     -> Option<Result<Var<'g>>> { $curvature };
                    curvature(self, g2, g, x)
                        .map(|c| unbroadcast(c?, x))
                        .transpose()?
                } else {
                    None
                };
                Ok(smallvec![dg, dx])
            }
            fn jvp<'g>(
                &self,
                t: &[Option<Var<'g>>],
                inputs: &[Var<'g>],
                out: &Var<'g>,
            ) -> Result<Option<Var<'g>>> {
                let (g, x) = (&inputs[0], &inputs[1]);
                let curvature = |$cs: &Self,
                                 $a: &Var<'g>,
                                 $g: &Var<'g>,
                                 $x: &Var<'g>|
                 -> Option<Result<Var<'g>>> { $curvature };
                sum_tangents(
                    out.shape(),
                    [
                        t[0].as_ref()
                            .map(|tg| g.graph().record(self.clone(), &[tg, x])),
                        t[1].as_ref().and_then(|tx| curvature(self, tx, g, x)),
                    ],
                )
            }
        }
    };
}
pub(crate) use slope_helper;

/// Implements `Differentiable` for a one-input elementwise op computed by the
/// unary functor `$functor`, whose backward (and tangent rule) is the slope
/// helper `$helper` applied to the gradient (or tangent) and the input; its
/// `backward_fast` runs the helper's kernel on plain tensors.
macro_rules! unary_with_slope {
    ($op:ty, $name:literal, |$s:ident| $functor:expr, $helper:expr) => {
        impl Differentiable for $op {
            fn name(&self) -> &str {
                $name
            }
            fn arity(&self) -> Option<usize> {
                Some(1)
            }
            fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
                expect_inputs($name, inputs, 1)?;
                let $s = self;
                Ok(kernels::map(inputs[0], $functor))
            }
            fn backward<'g>(
                &self,
                g: &Var<'g>,
                inputs: &[Var<'g>],
                _out: &Var<'g>,
            ) -> Result<GradInputs<'g>> {
                let $s = self;
                Ok(smallvec![Some(
                    g.graph().record($helper, &[g, &inputs[0]])?
                )])
            }
            fn backward_fast(
                &self,
                g: &Tensor,
                inputs: &[&Tensor],
                _out: &Tensor,
                _needs: &[bool],
                grads: &mut [Option<Tensor>],
            ) -> Result<bool> {
                // The helper's own kernel, without building Vars.
                let $s = self;
                grads[0] = Some($helper.forward(&[g, inputs[0]])?);
                Ok(true)
            }
            #[inline]
            fn backward_scalar(&self, call: &mut crate::ops::ScalarBackward<'_>) -> bool {
                // The helper's per-element rule: the kernel's bits.
                let $s = self;
                let helper = $helper;
                // An error declines: `backward_fast` then reports it.
                match call {
                    crate::ops::ScalarBackward::F32(a) if a.inputs.len() == 1 => {
                        match helper.slope_at(a.grad, a.inputs[0]) {
                            Ok(d) => a.grads[0] = d,
                            Err(_) => return false,
                        }
                    }
                    crate::ops::ScalarBackward::F64(a) if a.inputs.len() == 1 => {
                        match helper.slope_at(a.grad, a.inputs[0]) {
                            Ok(d) => a.grads[0] = d,
                            Err(_) => return false,
                        }
                    }
                    _ => return false,
                }
                true
            }
            fn jvp<'g>(
                &self,
                t: &[Option<Var<'g>>],
                inputs: &[Var<'g>],
                _out: &Var<'g>,
            ) -> Result<Option<Var<'g>>> {
                let $s = self;
                t[0].as_ref()
                    .map(|t| t.graph().record($helper, &[t, &inputs[0]]))
                    .transpose()
            }
        }
    };
}
pub(crate) use unary_with_slope;
