//! Source files, spans, and the one error type of the crate.
//!
//! Every user-facing failure (syntax, type, bad argument, run time) is an [`Error`] with a kind,
//! a message, and where possible a [`Span`] into a [`Source`]. [`Error::render`] turns it into a
//! report naming `file:line:column` with the offending source line underlined.

use codespan_reporting::diagnostic::{Diagnostic, Label};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term::{self, Config};
use std::fmt;

/// A byte range `start..end` in a source text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

impl Span {
    /// The span `start..end`.
    pub fn new(start: usize, end: usize) -> Span {
        Span {
            start: start as u32,
            end: end as u32,
        }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

/// A named source text (a `.chad` file, or a command-line argument being parsed).
#[derive(Clone, Debug)]
pub struct Source {
    /// File name as shown in messages.
    pub name: String,
    /// The text.
    pub text: String,
}

impl Source {
    /// A source with a name and text.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Source {
        Source {
            name: name.into(),
            text: text.into(),
        }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: u32) -> (usize, usize) {
        let offset = (offset as usize).min(self.text.len());
        let before = &self.text[..floor_char_boundary(&self.text, offset)];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before[line_start..].chars().count() + 1;
        (line, col)
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// What went wrong, broadly. The CLI maps every kind to exit status 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The program text does not parse.
    Syntax,
    /// The program does not type-check.
    Type,
    /// A command-line argument value is malformed or has the wrong type or count.
    Argument,
    /// Evaluation failed (index out of range, division by zero, ...).
    Runtime,
    /// A file could not be read, or a requested definition does not exist.
    Input,
    /// A construct is not supported by the requested operation.
    Unsupported,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Syntax => "syntax error",
            ErrorKind::Type => "type error",
            ErrorKind::Argument => "bad argument",
            ErrorKind::Runtime => "runtime error",
            ErrorKind::Input => "input error",
            ErrorKind::Unsupported => "not supported",
        })
    }
}

/// An error with a kind, a message, and optionally a location, a label for the location and notes.
///
/// Boxed so that `Result<Value, Error>` stays small on hot paths.
#[derive(Clone, thiserror::Error)]
#[error("{}", .0.message)]
pub struct Error(Box<ErrorData>);

#[derive(Clone, Debug)]
struct ErrorData {
    kind: ErrorKind,
    message: String,
    span: Option<Span>,
    label: Option<String>,
    notes: Vec<String>,
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.0.kind, self.0.message)?;
        if let Some(s) = self.0.span {
            write!(f, " at {}..{}", s.start, s.end)?;
        }
        Ok(())
    }
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error without a location.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error(Box::new(ErrorData {
            kind,
            message: message.into(),
            span: None,
            label: None,
            notes: Vec::new(),
        }))
    }

    /// A new error at a span.
    pub fn at(kind: ErrorKind, span: Span, message: impl Into<String>) -> Error {
        Error::new(kind, message).with_span(span)
    }

    /// A syntax error at a span.
    pub fn syntax(span: Span, message: impl Into<String>) -> Error {
        Error::at(ErrorKind::Syntax, span, message)
    }

    /// A type error at a span.
    pub fn type_error(span: Span, message: impl Into<String>) -> Error {
        Error::at(ErrorKind::Type, span, message)
    }

    /// A runtime error (its span is usually attached later, by the evaluator).
    pub fn runtime(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Runtime, message)
    }

    /// Sets the location.
    pub fn with_span(mut self, span: Span) -> Error {
        self.0.span = Some(span);
        self
    }

    /// Sets the location unless one is already set.
    pub fn or_span(mut self, span: Span) -> Error {
        if self.0.span.is_none() {
            self.0.span = Some(span);
        }
        self
    }

    /// Sets the short text printed under the underlined source.
    pub fn with_label(mut self, label: impl Into<String>) -> Error {
        self.0.label = Some(label.into());
        self
    }

    /// Adds a note (printed after the source snippet).
    pub fn with_note(mut self, note: impl Into<String>) -> Error {
        self.0.notes.push(note.into());
        self
    }

    /// Prefixes the message, e.g. with "argument 2: ".
    pub fn prefixed(mut self, prefix: &str) -> Error {
        self.0.message = format!("{prefix}{}", self.0.message);
        self
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The message, without location.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// The location, if any.
    pub fn span(&self) -> Option<Span> {
        self.0.span
    }

    /// The notes.
    pub fn notes(&self) -> &[String] {
        &self.0.notes
    }

    /// `file:line:column` of the error in `source`, if it has a span.
    pub fn location(&self, source: &Source) -> Option<String> {
        self.0.span.map(|s| {
            let (l, c) = source.line_col(s.start);
            format!("{}:{l}:{c}", source.name)
        })
    }

    /// A multi-line report: the kind and message, `file:line:column`, the source line with the
    /// span underlined, and the notes. Without a span (or source) it is `error: message` plus
    /// notes.
    pub fn render(&self, source: Option<&Source>) -> String {
        let d = &self.0;
        let mut diag = Diagnostic::error().with_message(format!("{}: {}", d.kind, d.message));
        diag = diag.with_notes(d.notes.clone());
        match (source, d.span) {
            (Some(src), Some(span)) => {
                let file = SimpleFile::new(src.name.as_str(), src.text.as_str());
                let len = src.text.len();
                let start = (span.start as usize).min(len);
                let end = (span.end as usize).clamp(start, len);
                let mut label = Label::primary((), start..end);
                if let Some(l) = &d.label {
                    label = label.with_message(l.clone());
                }
                diag = diag.with_labels(vec![label]);
                term::emit_into_string(&Config::default(), &file, &diag)
                    .unwrap_or_else(|_| self.render_plain(Some(src)))
            }
            _ => self.render_plain(source),
        }
    }

    fn render_plain(&self, source: Option<&Source>) -> String {
        let d = &self.0;
        let mut s = match source.and_then(|src| self.location(src)) {
            Some(loc) => format!("error: {loc}: {}: {}\n", d.kind, d.message),
            None => format!("error: {}: {}\n", d.kind, d.message),
        };
        for n in &d.notes {
            s.push_str(&format!("  = note: {n}\n"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based_and_count_characters() {
        let src = Source::new("f.chad", "ab\ncdé\nxy");
        assert_eq!(src.line_col(0), (1, 1));
        assert_eq!(src.line_col(3), (2, 1));
        assert_eq!(src.line_col(8), (3, 1));
        assert_eq!(src.line_col(6), (2, 3)); // byte 6 is inside 'é', floors to its start
    }

    #[test]
    fn render_names_file_line_column_and_underlines() {
        let src = Source::new("prog.chad", "def f (x : Real) : Real =\n  x + y\n");
        let e = Error::type_error(Span::new(32, 33), "unknown variable `y`")
            .with_label("not in scope")
            .with_note("defined names: f, x");
        let r = e.render(Some(&src));
        assert!(r.contains("type error: unknown variable `y`"), "{r}");
        assert!(r.contains("prog.chad:2:7"), "{r}");
        assert!(r.contains("not in scope"), "{r}");
        assert!(r.contains("defined names"), "{r}");
    }

    #[test]
    fn render_without_span() {
        let e = Error::runtime("boom");
        assert_eq!(e.render(None), "error: runtime error: boom\n");
    }
}
