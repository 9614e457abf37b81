//! [`ExprError`]: a message tied to a span of the source, rendered with a
//! caret under the offending column.

use std::fmt;
use std::sync::Arc;

use super::Span;

/// An error in an expression: a syntax error, an unknown name or function,
/// or an error the engine reported for one operation (named by its span).
#[derive(Clone, Debug, PartialEq)]
pub struct ExprError {
    message: String,
    span: Span,
    source: Arc<str>,
    note: Option<String>,
}

impl ExprError {
    pub(crate) fn new(source: &Arc<str>, span: Span, message: impl Into<String>) -> Self {
        let end = span.end.clamp(span.start, source.len());
        ExprError {
            message: message.into(),
            span: span.start.min(source.len())..end,
            source: source.clone(),
            note: None,
        }
    }

    pub(crate) fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The byte range of the source the error is about (empty at the end
    /// of input for "unexpected end of input").
    pub fn span(&self) -> Span {
        self.span.clone()
    }

    /// A hint, such as the names that are defined.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// The 1-based line of the span's start.
    pub fn line(&self) -> usize {
        1 + self.source[..self.span.start].matches('\n').count()
    }

    /// The 1-based column (in characters) of the span's start on its line.
    pub fn column(&self) -> usize {
        let before = &self.source[..self.span.start];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        1 + before[line_start..].chars().count()
    }

    /// The message, the source line, and carets under the span:
    ///
    /// ```text
    /// error: unknown function `tanhh` (did you mean `tanh`?)
    ///   x*y + tanhh(x)
    ///         ^^^^^
    /// ```
    pub fn render(&self) -> String {
        let start = self.span.start;
        let line_start = self.source[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = self.source[start..]
            .find('\n')
            .map_or(self.source.len(), |i| start + i);
        let line = &self.source[line_start..line_end];
        let pad = self.column() - 1;
        let end = self.span.end.min(line_end);
        let width = self.source[start..end].chars().count().max(1);
        let mut out = format!("error: {}\n", self.message);
        if self.line() > 1 || self.source.contains('\n') {
            out.push_str(&format!(
                "  (line {}, column {})\n",
                self.line(),
                self.column()
            ));
        }
        out.push_str(&format!(
            "  {line}\n  {}{}\n",
            " ".repeat(pad),
            "^".repeat(width)
        ));
        if let Some(note) = &self.note {
            out.push_str(&format!("note: {note}\n"));
        }
        out
    }
}

impl fmt::Display for ExprError {
    /// `column 7: unknown function ...`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {}: {}", self.column(), self.message)?;
        if let Some(note) = &self.note {
            write!(f, " ({note})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ExprError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carets_sit_under_the_span() {
        let src: Arc<str> = Arc::from("a + bb * c");
        let e = ExprError::new(&src, 4..6, "unknown variable `bb`");
        assert_eq!(e.column(), 5);
        assert_eq!(
            e.render(),
            "error: unknown variable `bb`\n  a + bb * c\n      ^^\n"
        );
        assert_eq!(e.to_string(), "column 5: unknown variable `bb`");
    }

    #[test]
    fn end_of_input_and_later_lines() {
        let src: Arc<str> = Arc::from("x +");
        let e = ExprError::new(&src, 3..3, "unexpected end of input");
        assert_eq!(e.column(), 4);
        assert!(e.render().ends_with("  x +\n     ^\n"));
        let src: Arc<str> = Arc::from("a = x;\nb = é + ?");
        let e = ExprError::new(&src, 16..17, "unexpected `?`").with_note("try again");
        assert_eq!((e.line(), e.column()), (2, 9));
        assert!(e
            .render()
            .contains("(line 2, column 9)\n  b = é + ?\n          ^\nnote: try again\n"));
    }
}
