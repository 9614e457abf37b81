//! [`Pointwise`]: an elementwise op as a kernel over plain slices and
//! numbers, which a compiled step's fused kernels run (see
//! [`compile`](crate::compile)). An op offers it through
//! [`Differentiable::pointwise`](super::Differentiable::pointwise); the
//! elementwise rules (`ops/rule/`) all do.

/// Basic arithmetic a compiled step's scalar programs run without a call
/// (a `match` on this tag instead of a dynamic call per node). An op whose
/// [`Pointwise::primitive`] names one must compute exactly that, with the
/// IEEE operation of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`
    Div,
    /// `-a`
    Neg,
}

/// An elementwise op of one to four inputs (no broadcasting: every input
/// has the output's length), in both float dtypes. Every method must give
/// exactly the bits of the op's `forward` at each element, so a fused
/// kernel equals the ops it replaces.
pub trait Pointwise: Send + Sync {
    /// The number of inputs (1 to 4).
    fn arity(&self) -> usize;

    /// `out[i] = f(ins[0][i], ins[1][i], ...)`; every input has `out`'s length.
    fn run_f32(&self, ins: &[&[f32]], out: &mut [f32]);

    /// [`run_f32`](Self::run_f32) in f64.
    fn run_f64(&self, ins: &[&[f64]], out: &mut [f64]);

    /// One element: `f(args[0], ..)`; arguments past the arity are ignored.
    fn one_f32(&self, args: [f32; 4]) -> f32;

    /// [`one_f32`](Self::one_f32) in f64.
    fn one_f64(&self, args: [f64; 4]) -> f64;

    /// The basic operation this op is, if it is one (see [`Primitive`]).
    fn primitive(&self) -> Option<Primitive> {
        None
    }
}
