//! Tokens of the surface language.

use crate::error::{Error, Result, Span};
use std::fmt;
use std::rc::Rc;

/// A token.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// An identifier (letters, digits, `_` and `'`, not starting with a digit or `'`).
    Ident(Rc<str>),
    /// A keyword: `def let in if then else case of true false with`.
    Keyword(&'static str),
    /// An integer literal.
    Int(i64),
    /// A real literal (has a `.` or an exponent).
    Real(f64),
    /// Punctuation or an operator.
    Sym(&'static str),
    /// End of input.
    Eof,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(x) => write!(f, "identifier `{x}`"),
            Tok::Keyword(k) => write!(f, "keyword `{k}`"),
            Tok::Int(i) => write!(f, "number `{i}`"),
            Tok::Real(x) => write!(f, "number `{}`", crate::value::format_real(*x)),
            Tok::Sym(s) => write!(f, "`{s}`"),
            Tok::Eof => f.write_str("end of input"),
        }
    }
}

const KEYWORDS: &[&str] = &[
    "def", "let", "in", "if", "then", "else", "case", "of", "true", "false", "with",
];

// Longest symbols first so that `->` wins over `-`, `==` over `=`, and so on.
const SYMBOLS: &[&str] = &[
    "->", "||", "&&", "==", "!=", "<=", ">=", "(", ")", "[", "]", ",", ":", "=", "\\", "|", "<",
    ">", "+", "-", "*", "/", "%", "^", "!",
];

/// Splits a text into tokens with their spans; the last token is [`Tok::Eof`].
pub fn lex(text: &str) -> Result<Vec<(Tok, Span)>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'#' {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let start = i;
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'\'')
            {
                i += 1;
            }
            let word = &text[start..i];
            let tok = match KEYWORDS.iter().find(|k| **k == word) {
                Some(k) => Tok::Keyword(k),
                None => Tok::Ident(word.into()),
            };
            out.push((tok, Span::new(start, i)));
            continue;
        }
        if c.is_ascii_digit() {
            out.push(number(text, &mut i)?);
            continue;
        }
        if let Some(sym) = SYMBOLS.iter().find(|s| text[i..].starts_with(**s)) {
            i += sym.len();
            out.push((Tok::Sym(sym), Span::new(start, i)));
            continue;
        }
        let ch = text[i..].chars().next().expect("i < len");
        return Err(Error::syntax(
            Span::new(i, i + ch.len_utf8()),
            format!("unexpected character `{ch}`"),
        ));
    }
    out.push((Tok::Eof, Span::new(text.len(), text.len())));
    Ok(out)
}

fn number(text: &str, i: &mut usize) -> Result<(Tok, Span)> {
    let bytes = text.as_bytes();
    let start = *i;
    let digits = |i: &mut usize| {
        while *i < bytes.len() && bytes[*i].is_ascii_digit() {
            *i += 1;
        }
    };
    digits(i);
    let mut real = false;
    if *i + 1 < bytes.len() && bytes[*i] == b'.' && bytes[*i + 1].is_ascii_digit() {
        real = true;
        *i += 1;
        digits(i);
    }
    if *i < bytes.len() && (bytes[*i] == b'e' || bytes[*i] == b'E') {
        let mut j = *i + 1;
        if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
            j += 1;
        }
        if j < bytes.len() && bytes[j].is_ascii_digit() {
            real = true;
            *i = j;
            digits(i);
        }
    }
    let span = Span::new(start, *i);
    if *i < bytes.len() && (bytes[*i].is_ascii_alphabetic() || bytes[*i] == b'_') {
        return Err(Error::syntax(
            Span::new(start, *i + 1),
            format!("malformed number `{}`", &text[start..=*i]),
        ));
    }
    let s = &text[start..*i];
    if real {
        let x: f64 = s
            .parse()
            .map_err(|_| Error::syntax(span, format!("malformed number `{s}`")))?;
        Ok((Tok::Real(x), span))
    } else {
        let n: i64 = s.parse().map_err(|_| {
            Error::syntax(span, format!("integer literal `{s}` is too large for Int"))
                .with_note("write it as a Real, e.g. with a trailing `.0`")
        })?;
        Ok((Tok::Int(n), span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex(s).unwrap().into_iter().map(|(t, _)| t).collect()
    }

    #[test]
    fn numbers_identifiers_keywords_and_symbols() {
        assert_eq!(
            toks("let x' = 1.5e2 in f_2 x' 3 # comment\n->"),
            vec![
                Tok::Keyword("let"),
                Tok::Ident("x'".into()),
                Tok::Sym("="),
                Tok::Real(150.0),
                Tok::Keyword("in"),
                Tok::Ident("f_2".into()),
                Tok::Ident("x'".into()),
                Tok::Int(3),
                Tok::Sym("->"),
                Tok::Eof
            ]
        );
        assert_eq!(toks("2e-3")[0], Tok::Real(0.002));
        assert_eq!(toks("a!=b")[1], Tok::Sym("!="));
        assert_eq!(toks("xs!i")[1], Tok::Sym("!"));
        assert_eq!(toks("a||b|c")[1], Tok::Sym("||"));
        assert_eq!(toks("a||b|c")[3], Tok::Sym("|"));
    }

    #[test]
    fn lexical_errors_have_positions() {
        let e = lex("x @ y").unwrap_err();
        assert_eq!(e.message(), "unexpected character `@`");
        assert_eq!(e.span(), Some(Span::new(2, 3)));
        let e = lex("99999999999999999999").unwrap_err();
        assert!(e.message().contains("too large"), "{}", e.message());
        let e = lex("12abc").unwrap_err();
        assert!(e.message().contains("malformed number"), "{}", e.message());
    }
}
