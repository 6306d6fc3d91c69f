//! Printing combinators: a model whose morphisms are documents.
//!
//! Notation: `g ∘ f`, `⟨f, g⟩`, `[f, g]` (copairing), `curry(f)`, `map(f)`, `map2(f)`,
//! `build(f)`, generators by name (`id`, `bang`, `fst`, `snd`, `eval`, `inl`, `inr`, `dist`,
//! `index`, `length`, `replicate`, `array₃`), constants by value (`2.0`), primitives by name or
//! operator section (`sin`, `(+)`). A projection chain prints as `snd ∘ fst³`.
//!
//! A morphism of this model is a [`Chain`]: the parts of a composite `h ∘ g ∘ f`, kept flat
//! (composition is associative, so it never needs parentheses) in a persistent vector, so that
//! composing is O(log n) and a chain of 10⁴ compositions is laid out in one linear pass.

use super::model::{Arrays, Cartesian, Category, Closed, Coproducts, Iteration, Primitives};
use super::{Comb, Path, Step, interpret};
use crate::deep::with_large_stack;
use crate::prim::{Fixity, Prim};
use crate::source::print::{Doc, delimited};
use crate::source::term::Lit;
use crate::types::Type;
use crate::value::format_real;
use pretty::RcDoc;
use std::convert::Infallible;

/// The printing model.
#[derive(Clone, Copy, Debug, Default)]
pub struct Printer;

/// A morphism of the printing model: the parts of a composition chain, outermost first.
#[derive(Clone)]
pub struct Chain(im::Vector<Doc>);

impl Chain {
    fn one(d: Doc) -> Chain {
        Chain(im::vector![d])
    }

    /// The chain laid out as `h ∘ g ∘ f` on one line if it fits, else one part per line.
    pub fn doc(self) -> Doc {
        let mut parts = self.0.into_iter();
        let first = parts.next().expect("a chain has at least one part");
        parts
            .fold(first, |d, p| {
                d.append(RcDoc::text(" ∘")).append(RcDoc::line()).append(p)
            })
            .group()
    }
}

/// Prints a combinator at a line width.
pub fn to_string(c: &Comb, width: usize) -> String {
    with_large_stack(|| {
        let chain = match interpret(c, &Printer) {
            Ok(d) => d,
            Err(e) => match e {},
        };
        crate::source::print::render(&chain.doc(), width)
    })
}

type R = Result<Chain, Infallible>;

fn text(s: impl Into<String>) -> R {
    Ok(Chain::one(RcDoc::text(s.into())))
}

fn call(name: &str, args: Vec<Chain>) -> R {
    let args = args.into_iter().map(Chain::doc).collect();
    Ok(Chain::one(delimited(&format!("{name}("), args, ")")))
}

fn superscript(n: usize) -> String {
    const DIGITS: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    n.to_string()
        .chars()
        .map(|c| DIGITS[c.to_digit(10).expect("digit") as usize])
        .collect()
}

fn subscript(n: usize) -> String {
    const DIGITS: [char; 10] = ['₀', '₁', '₂', '₃', '₄', '₅', '₆', '₇', '₈', '₉'];
    n.to_string()
        .chars()
        .map(|c| DIGITS[c.to_digit(10).expect("digit") as usize])
        .collect()
}

impl Category for Printer {
    type Mor = Chain;
    type Error = Infallible;

    fn id(&self, _: &Type) -> R {
        text("id")
    }

    fn compose(&self, g: Chain, f: Chain) -> R {
        // Associative, and the only infix form: the parts are kept flat, never parenthesised.
        let mut parts = g.0;
        parts.append(f.0);
        Ok(Chain(parts))
    }
}

impl Cartesian for Printer {
    fn bang(&self, _: &Type) -> R {
        text("bang")
    }

    fn fst(&self, _: &Type, _: &Type) -> R {
        text("fst")
    }

    fn snd(&self, _: &Type, _: &Type) -> R {
        text("snd")
    }

    fn pair(&self, f: Chain, g: Chain) -> R {
        Ok(Chain::one(delimited("⟨", vec![f.doc(), g.doc()], "⟩")))
    }

    fn proj(&self, _: &Type, path: &Path) -> R {
        // Written outermost first: the last step is printed first.
        let mut parts: Vec<String> = path
            .steps
            .iter()
            .rev()
            .map(|s| if *s == Step::Fst { "fst" } else { "snd" }.to_string())
            .collect();
        match path.skip {
            0 => {}
            1 => parts.push("fst".into()),
            k => parts.push(format!("fst{}", superscript(k))),
        }
        if parts.is_empty() {
            return text("id");
        }
        text(parts.join(" ∘ "))
    }
}

impl Closed for Printer {
    fn curry(&self, f: Chain, _: &Type, _: &Type, _: &Type) -> R {
        call("curry", vec![f])
    }

    fn eval(&self, _: &Type, _: &Type) -> R {
        text("eval")
    }
}

impl Coproducts for Printer {
    fn inl(&self, _: &Type, _: &Type) -> R {
        text("inl")
    }

    fn inr(&self, _: &Type, _: &Type) -> R {
        text("inr")
    }

    fn copair(&self, f: Chain, g: Chain, _: &Type, _: &Type, _: &Type) -> R {
        Ok(Chain::one(delimited("[", vec![f.doc(), g.doc()], "]")))
    }

    fn dist(&self, _: &Type, _: &Type, _: &Type) -> R {
        text("dist")
    }
}

impl Arrays for Printer {
    fn map(&self, f: Chain, _: &Type, _: &Type, _: &Type) -> R {
        call("map", vec![f])
    }

    fn map2(&self, f: Chain, _: &Type, _: &Type, _: &Type, _: &Type) -> R {
        call("map2", vec![f])
    }

    fn build(&self, f: Chain, _: &Type, _: &Type) -> R {
        call("build", vec![f])
    }

    fn index(&self, _: &Type) -> R {
        text("index")
    }

    fn length(&self, _: &Type) -> R {
        text("length")
    }

    fn replicate(&self, _: &Type) -> R {
        text("replicate")
    }

    fn array(&self, _: &Type, n: usize) -> R {
        text(format!("array{}", subscript(n)))
    }
}

impl Iteration for Printer {
    fn iter(&self, f: Chain, _: &Type, _: &Type, _: &Type) -> R {
        call("it", vec![f])
    }

    fn iter_tape(&self, f: Chain, _: &Type, _: &Type, _: &Type, _: &Type) -> R {
        call("itTape", vec![f])
    }

    fn fix(&self, h: Chain, _: &Type, _: &Type, _: crate::error::Span) -> R {
        call("fix", vec![h])
    }
}

impl Primitives for Printer {
    fn constant(&self, lit: &Lit) -> R {
        text(match *lit {
            Lit::Real(x) => format_real(x),
            Lit::Int(i) => i.to_string(),
            Lit::Bool(b) => b.to_string(),
            Lit::Unit => "()".to_string(),
        })
    }

    fn prim(&self, op: &Prim) -> R {
        match op.fixity() {
            Fixity::Infix(sym, _) | Fixity::InfixRight(sym, _) => text(format!("({sym})")),
            _ => text(op.name()),
        }
    }
}
