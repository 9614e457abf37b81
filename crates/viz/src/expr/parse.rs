//! The grammar, with `chumsky`:
//!
//! ```text
//! program    = (name "=" expr ";")* expr ";"?
//! expr       = product (("+" | "-") product)*
//! product    = unary (("*" | "/") unary)*
//! unary      = "-" unary | power
//! power      = atom (("^" | "**") unary)?        (right-associative: 2^-x, x^y^z)
//! atom       = number | name "(" (expr ("," expr)*)? ")" | name | "(" expr ")"
//! ```

use std::sync::Arc;

use chumsky::error::RichPattern;
use chumsky::prelude::*;

use super::{Assignment, BinOp, Expr, ExprError, ExprKind, Program, Span};

/// Expressions with more operators and parentheses than this are refused:
/// building and dropping the tree recurses once per level.
pub(crate) const MAX_OPERATORS: usize = 2000;

type Extra<'src> = extra::Err<Rich<'src, char>>;

/// Parses `source` into a [`Program`]; a syntax error names what was found
/// and what was expected, at its span.
///
/// ```
/// use retrograd::expr::{parse, ExprKind, BinOp};
/// let p = parse("2 * (x + 1)")?;
/// let ExprKind::Binary { op, op_span, .. } = &p.output.kind else { unreachable!() };
/// assert_eq!((*op, op_span.clone()), (BinOp::Mul, 2..3));
///
/// let err = parse("x * (y + )").unwrap_err();
/// assert_eq!(err.column(), 10);
/// assert!(err.message().starts_with("unexpected `)`, expected "));
/// # Ok::<(), retrograd::expr::ExprError>(())
/// ```
pub fn parse(source: &str) -> Result<Program, ExprError> {
    let src: Arc<str> = Arc::from(source);
    let operators = source.chars().filter(|c| "+-*/^(,".contains(*c)).count();
    if operators > MAX_OPERATORS {
        return Err(ExprError::new(
            &src,
            0..source.len(),
            format!("expression too long: {operators} operators (at most {MAX_OPERATORS})"),
        ));
    }
    match program().parse(source).into_result() {
        Ok((assignments, output)) => Ok(Program {
            source: src,
            assignments,
            output,
        }),
        Err(errors) => Err(syntax_error(&src, &errors[0])),
    }
}

fn syntax_error(src: &Arc<str>, e: &Rich<'_, char>) -> ExprError {
    let span = e.span().start..e.span().end;
    if let chumsky::error::RichReason::Custom(msg) = e.reason() {
        return ExprError::new(src, span, msg.clone());
    }
    let found = match e.found() {
        Some(c) => format!("unexpected `{c}`"),
        None => "unexpected end of input".to_string(),
    };
    let mut expected: Vec<String> = e.expected().filter_map(describe).collect();
    expected.sort();
    expected.dedup();
    let message = match expected.len() {
        0 => found,
        1 => format!("{found}, expected {}", expected[0]),
        n => format!(
            "{found}, expected {} or {}",
            expected[..n - 1].join(", "),
            expected[n - 1]
        ),
    };
    ExprError::new(src, span, message)
}

fn describe(p: &RichPattern<'_, char>) -> Option<String> {
    match p {
        RichPattern::Token(c) => Some(format!("`{}`", **c)),
        // Whitespace is allowed almost everywhere; listing it is noise.
        RichPattern::Label(l) if l == "whitespace" => None,
        RichPattern::Label(l) => Some(l.to_string()),
        RichPattern::Identifier(s) => Some(format!("`{s}`")),
        RichPattern::EndOfInput => Some("end of input".to_string()),
        _ => None,
    }
}

fn span_of(s: SimpleSpan) -> Span {
    s.start..s.end
}

fn binary(op: BinOp, op_span: Span, lhs: Expr, rhs: Expr) -> Expr {
    Expr {
        span: lhs.span.start..rhs.span.end,
        kind: ExprKind::Binary {
            op,
            op_span,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        },
    }
}

fn program<'src>() -> impl Parser<'src, &'src str, (Vec<Assignment>, Expr), Extra<'src>> {
    let name = text::ascii::ident()
        .map_with(|s: &str, e| (s.to_string(), span_of(e.span())))
        .labelled("a name");
    let assignment = name
        .padded()
        .then_ignore(just('=').padded())
        .then(expression())
        .then_ignore(just(';').padded())
        .map(|((name, name_span), value)| Assignment {
            name,
            name_span,
            value,
        });
    assignment
        .repeated()
        .collect::<Vec<_>>()
        .then(expression())
        .then_ignore(just(';').padded().or_not())
        .padded()
        .then_ignore(end())
}

fn expression<'src>() -> impl Parser<'src, &'src str, Expr, Extra<'src>> + Clone {
    recursive(|expr| {
        let digits = text::digits(10);
        let mantissa = digits
            .then(just('.').then(digits.or_not()).or_not())
            .ignored()
            .or(just('.').then(digits).ignored());
        let exponent = one_of("eE").then(one_of("+-").or_not()).then(digits);
        let number = mantissa
            .then(exponent.or_not())
            .to_slice()
            .try_map(|s: &str, span| {
                s.parse::<f64>()
                    .map_err(|e| Rich::custom(span, format!("bad number `{s}`: {e}")))
            })
            .map_with(|v, e| Expr {
                kind: ExprKind::Number(v),
                span: span_of(e.span()),
            })
            .labelled("a number");

        let name = text::ascii::ident()
            .map_with(|s: &str, e| (s.to_string(), span_of(e.span())))
            .labelled("a name");
        // Whitespace after `)` belongs to the surroundings, not to the call's span.
        let close = text::whitespace().ignore_then(just(')'));
        let call = name
            .then(
                expr.clone()
                    .separated_by(just(',').padded())
                    .collect::<Vec<_>>()
                    .delimited_by(just('(').padded(), close),
            )
            .map_with(|((name, name_span), args), e| Expr {
                kind: ExprKind::Call {
                    name,
                    name_span,
                    args,
                },
                span: span_of(e.span()),
            });
        let variable = name.map(|(name, span)| Expr {
            kind: ExprKind::Name(name),
            span,
        });
        let parenthesised = expr.delimited_by(just('(').padded(), close);
        let atom = choice((number, call, variable, parenthesised)).padded();

        let unary = recursive(|unary| {
            let power_op = just("**")
                .or(just("^"))
                .map_with(|_, e| span_of(e.span()))
                .padded();
            let power = atom
                .clone()
                .then(power_op.then(unary.clone()).or_not())
                .map(|(base, exponent)| match exponent {
                    Some((op_span, rhs)) => binary(BinOp::Pow, op_span, base, rhs),
                    None => base,
                });
            just('-')
                .map_with(|_, e| span_of(e.span()))
                .padded()
                .then(unary)
                .map(|(minus, inner): (Span, Expr)| Expr {
                    span: minus.start..inner.span.end,
                    kind: ExprKind::Neg(Box::new(inner)),
                })
                .or(power)
        });

        let operator = |c: char, op: BinOp| just(c).map_with(move |_, e| (op, span_of(e.span())));
        let product = unary.clone().foldl(
            choice((operator('*', BinOp::Mul), operator('/', BinOp::Div)))
                .padded()
                .then(unary)
                .repeated(),
            |lhs, ((op, op_span), rhs)| binary(op, op_span, lhs, rhs),
        );
        product.clone().foldl(
            choice((operator('+', BinOp::Add), operator('-', BinOp::Sub)))
                .padded()
                .then(product)
                .repeated(),
            |lhs, ((op, op_span), rhs)| binary(op, op_span, lhs, rhs),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree as S-expressions, to check shape and precedence.
    fn sexp(e: &Expr) -> String {
        match &e.kind {
            ExprKind::Number(v) => format!("{v}"),
            ExprKind::Name(n) => n.clone(),
            ExprKind::Neg(x) => format!("(neg {})", sexp(x)),
            ExprKind::Binary { op, lhs, rhs, .. } => {
                format!("({} {} {})", op.op_name(), sexp(lhs), sexp(rhs))
            }
            ExprKind::Call { name, args, .. } => {
                let args: Vec<String> = args.iter().map(sexp).collect();
                format!("({name} {})", args.join(" "))
            }
        }
    }

    fn tree(src: &str) -> String {
        sexp(&parse(src).unwrap().output)
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(tree("x*y + x"), "(add (mul x y) x)");
        assert_eq!(tree("a - b - c"), "(sub (sub a b) c)");
        assert_eq!(tree("a / b * c"), "(mul (div a b) c)");
        assert_eq!(tree("-x^2"), "(neg (pow x 2))");
        assert_eq!(tree("x ** y ^ z"), "(pow x (pow y z))");
        assert_eq!(tree("2^-x"), "(pow 2 (neg x))");
        assert_eq!(tree("--x"), "(neg (neg x))");
        assert_eq!(tree("(a + b) * c"), "(mul (add a b) c)");
        assert_eq!(tree("f(x, g(y)) + h()"), "(add (f x (g y)) (h ))");
        assert_eq!(tree(" 1.5e2 + .25 + 3. "), "(add (add 150 0.25) 3)");
    }

    #[test]
    fn spans_point_into_the_source() {
        let p = parse("tanh(q*a) + b").unwrap();
        assert_eq!(p.output.span, 0..13);
        let ExprKind::Binary { op_span, lhs, .. } = &p.output.kind else {
            panic!("not a binary expression")
        };
        assert_eq!(*op_span, 10..11);
        let ExprKind::Call {
            name_span, args, ..
        } = &lhs.kind
        else {
            panic!("not a call")
        };
        assert_eq!((name_span.clone(), lhs.span.clone()), (0..4, 0..9));
        assert_eq!(args[0].span, 5..8);
    }

    #[test]
    fn assignments_come_first() {
        let p = parse("h = tanh(x); e = h - 1; e*e;").unwrap();
        let names: Vec<&str> = p.assignments.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["h", "e"]);
        assert_eq!(p.assignments[1].name_span, 13..14);
        assert_eq!(sexp(&p.output), "(mul e e)");
    }

    #[test]
    fn syntax_errors_name_the_column() {
        let e = parse("x * (y + )").unwrap_err();
        assert_eq!((e.column(), e.span()), (10, 9..10));
        assert!(e.message().starts_with("unexpected `)`"), "{}", e.message());
        assert!(e.message().contains("a number"), "{}", e.message());
        let e = parse("x*(y").unwrap_err();
        assert_eq!(e.column(), 5);
        assert!(!e.message().contains("whitespace"), "{}", e.message());
        assert!(e.message().ends_with("or `^`"), "{}", e.message());
        let e = parse("x +").unwrap_err();
        assert_eq!(e.column(), 4);
        assert!(e.message().starts_with("unexpected end of input"));
        let e = parse("2x").unwrap_err();
        assert_eq!(e.column(), 2);
        let e = parse("f(x,, y)").unwrap_err();
        assert_eq!(e.column(), 5);
        let e = parse("x $ y").unwrap_err();
        assert_eq!(e.column(), 3);
        assert!(e.message().starts_with("unexpected `$`"));
    }

    #[test]
    fn deep_nesting_parses_and_huge_input_is_refused() {
        let deep = format!("{}x{}", "(".repeat(300), ")".repeat(300));
        assert_eq!(tree(&deep), "x");
        let minus = format!("{}x", "-".repeat(300));
        assert!(tree(&minus).starts_with("(neg (neg"));
        let huge = vec!["x"; MAX_OPERATORS + 2].join("+");
        let e = parse(&huge).unwrap_err();
        assert!(e.message().starts_with("expression too long"));
    }
}
