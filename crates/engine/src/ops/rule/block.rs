//! [`Block`] as a [`Num`]: a rule's gradient evaluated one step at a time
//! over 64 f32 elements, which the fused kernels' loops run
//! (`kernels::blocks`). A loop over elements keeps one vector's dependency
//! chain in flight; a block keeps four (ARCHITECTURE.md, PERF: "Long
//! chains run in blocks"). Every step is the operation the element loop
//! runs, so the bits are the same.

use super::{BinaryRule, Cmp, Num, UnaryRule};
use crate::tensor::math::F32Lanes;
pub use crate::tensor::math::{Block, BLOCK};

impl Num for Block {
    #[inline(always)]
    fn lit(&self, c: f64) -> Self {
        Block::splat(c as f32)
    }
    #[inline(always)]
    fn map<R: UnaryRule>(&self, rule: R) -> Self {
        rule.value_block(*self)
    }
    #[inline(always)]
    fn zip<R: BinaryRule>(&self, rule: R, other: &Self) -> Self {
        F32Lanes::zip(*self, *other, |a, b| rule.value(a, b))
    }
    #[inline(always)]
    fn select(&self, cmp: Cmp, rhs: &Self, then: &Self, otherwise: &Self) -> Self {
        let mut out = otherwise.0;
        for (j, o) in out.iter_mut().enumerate() {
            if cmp.holds(self.0[j], rhs.0[j]) {
                *o = then.0[j];
            }
        }
        Block(out)
    }
}

#[cfg(test)]
mod tests {
    use super::BLOCK;
    use crate::core::Pointwise;
    use crate::ops::erfc::Erfc;
    use crate::ops::gelu::Gelu;
    use crate::ops::rule::unary_grad::UnaryGrad;
    use crate::ops::unary::{Exp, Tanh};
    use crate::ops::{Differentiable, OpRegistry};
    use crate::tensor::Tensor;

    /// Three blocks and a tail: a sweep over [-9, 9] with the special values.
    fn inputs(shift: f32) -> Vec<f32> {
        let n = 3 * BLOCK + 7;
        let mut x: Vec<f32> = (0..n)
            .map(|i| (i as f32 / n as f32 * 18.0 - 9.0) + shift)
            .collect();
        x[..6].copy_from_slice(&[
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            1e-40,
            -88.5,
        ]);
        x
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// Runs `k` over the inputs by its slice loop (by blocks) and element
    /// by element, and compares the bits.
    fn check(name: &str, k: &dyn Pointwise) {
        let arity = k.arity();
        let ins: Vec<Vec<f32>> = (0..arity).map(|i| inputs(0.37 * i as f32)).collect();
        let slices: Vec<&[f32]> = ins.iter().map(|v| &v[..]).collect();
        let mut out = vec![0.0f32; ins[0].len()];
        k.run_f32(&slices, &mut out);
        for (i, &o) in out.iter().enumerate() {
            let mut args = [0.0f32; 4];
            for (a, x) in args.iter_mut().zip(&ins) {
                *a = x[i];
            }
            let want = k.one_f32(args);
            assert!(
                same(o, want),
                "{name}: element {i} of {args:?}: {o} by blocks against {want}"
            );
        }
    }

    #[test]
    fn every_elementwise_kernel_gives_its_elements_bits_by_blocks() {
        let reg = OpRegistry::with_builtins();
        let mut checked = 0;
        for name in reg.names() {
            let op = reg.get(name).expect("a listed name");
            // An instance with typical parameters (the registry's clamp has no bounds).
            let op = op.facts().example.unwrap_or_else(|| op.clone());
            if let Some(k) = op.pointwise() {
                check(name, k.as_ref());
                if k.arity() == 1 {
                    // The eager forward (`kernels::map_slice`) by blocks too.
                    let x = inputs(0.0);
                    let t = Tensor::from_vec(x.clone(), &[x.len()]).expect("a valid shape");
                    let y = op.forward(&[&t]).expect("a unary forward");
                    for (i, (&o, &a)) in
                        y.as_slice::<f32>().expect("f32").iter().zip(&x).enumerate()
                    {
                        let want = k.one_f32([a, 0.0, 0.0, 0.0]);
                        assert!(
                            same(o, want),
                            "{name} forward: element {i} of {a}: {o} against {want}"
                        );
                    }
                    // The eager first-order backward (`kernels::zip`) by
                    // blocks, against the same call on each element alone.
                    let g = Tensor::from_vec(inputs(0.37), &[x.len()]).expect("a valid shape");
                    let grad = |g: &Tensor, x: &Tensor, y: &Tensor| {
                        let mut grads = [None];
                        let fast = op
                            .backward_fast(g, &[x], y, &[true], &mut grads)
                            .expect("a backward");
                        fast.then(|| grads[0].take().expect("a gradient"))
                    };
                    if let Some(all) = grad(&g, &t, &y) {
                        let (gs, ys) = (
                            g.as_slice::<f32>().expect("f32"),
                            y.as_slice::<f32>().expect("f32"),
                        );
                        for (i, &o) in all.as_slice::<f32>().expect("f32").iter().enumerate() {
                            let one = |v: f32| Tensor::scalar(v);
                            let alone = grad(&one(gs[i]), &one(x[i]), &one(ys[i]))
                                .expect("a fast backward");
                            let want = alone.as_slice::<f32>().expect("f32")[0];
                            assert!(
                                same(o, want),
                                "{name} backward: element {i}: {o} against {want}"
                            );
                        }
                    }
                }
                checked += 1;
            }
        }
        assert!(
            checked > 20,
            "only {checked} elementwise ops in the registry"
        );
        // The backward kernels of the rules that write their own blocks,
        // and of one that does not.
        let grads: [(&str, Box<dyn Differentiable>); 4] = [
            ("gelu_backward", Box::new(UnaryGrad::new(Gelu))),
            ("erfc_backward", Box::new(UnaryGrad::new(Erfc))),
            ("exp_backward", Box::new(UnaryGrad::new(Exp))),
            ("tanh_backward", Box::new(UnaryGrad::new(Tanh))),
        ];
        for (name, op) in grads {
            check(
                name,
                op.pointwise()
                    .expect("a unary gradient is pointwise")
                    .as_ref(),
            );
        }
    }
}
