//! Printing a typed program and reading it back gives the same program.
//!
//! Random programs are printed in surface syntax (`show --stage source`), parsed and checked
//! again; the result must be alpha-equivalent to the original (same shape, literals, primitives
//! and binding structure), so the printer's parenthesisation, renaming and ascriptions are
//! exactly what the parser and checker expect.

mod common;

use chad::internals::prim::Registry;
use chad::internals::random::{Config, program};
use chad::internals::source::term::{Entry, Term, TermKind, alpha_eq};
use proptest::test_runner::TestCaseError;

/// The entry's body under lambdas for its parameters, so that parameters are compared as
/// binders.
fn closed(e: &Entry) -> Term {
    e.params.iter().rev().fold(e.body.clone(), |b, p| {
        Term::new(TermKind::Lam(p.clone(), b), Default::default())
    })
}

/// The first pair of corresponding subterms that differ (for failure messages).
fn first_difference(a: &Term, b: &Term) -> String {
    let (ca, cb) = (a.children(), b.children());
    if ca.len() == cb.len() && std::mem::discriminant(&a.kind) == std::mem::discriminant(&b.kind) {
        for (x, y) in ca.iter().zip(cb.iter()) {
            if !alpha_eq(x, y) {
                return first_difference(x, y);
            }
        }
    }
    format!("{a}\n  versus\n{b}")
}

#[test]
fn printed_programs_parse_and_check_back_to_the_same_term() {
    let mut runner = common::runner(common::cases(300));
    runner
        .run(&program(Config::default()), |p| {
            let text = p.source();
            let prog = chad::internals::source::load(&text, &Registry::builtin())
                .map_err(|e| TestCaseError::fail(format!("{}\n{text}", e.render(None))))?;
            let entry = prog.entry(0);
            if !alpha_eq(&closed(&entry), &closed(&p.entry)) {
                return Err(TestCaseError::fail(format!(
                    "re-checked term differs:\n{text}\nfirst difference:\n{}",
                    first_difference(&closed(&p.entry), &closed(&entry))
                )));
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}
