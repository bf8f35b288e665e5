//! The SAT engine behind our own trait, and its CaDiCaL implementation.
//!
//! [`SatEngine`] is the small surface the encoding needs (variables, clauses, phases, assumptions, failed
//! assumptions). [`Cadical`] implements it with CaDiCaL through `cadical-sys`, and bridges a [`Theory`] to
//! CaDiCaL's IPASIR-UP `ExternalPropagator`. Another engine can replace CaDiCaL by implementing the trait and
//! driving the same [`Theory`].

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::time::Instant;

use cadical_sys::{CaDiCal, ExternalPropagator, Status, TerminateFlag, Terminator};

use crate::SolverError;
use crate::propagator::Theory;

/// The answer of one solve call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SatResult {
    /// A model exists; read it with [`SatEngine::value`].
    Sat,
    /// No model under the assumptions; ask [`SatEngine::failed`] which assumptions were used.
    Unsat,
}

/// The operations the encoding needs from a SAT engine. Literals are DIMACS integers.
pub trait SatEngine {
    /// A fresh variable.
    fn new_var(&mut self) -> i32;
    /// Adds a clause.
    fn add_clause(&mut self, lits: &[i32]);
    /// Asks the engine to try `lit` first when it decides its variable.
    fn set_phase(&mut self, lit: i32);
    /// Makes the theory see assignments to `var` (only with a theory attached).
    fn observe(&mut self, var: i32);
    /// Solves under `assumptions`.
    fn solve(&mut self, assumptions: &[i32]) -> Result<SatResult, SolverError>;
    /// The value of `lit` in the last model.
    fn value(&mut self, lit: i32) -> bool;
    /// After [`SatResult::Unsat`], whether the assumption `lit` was used in the refutation.
    fn failed(&mut self, lit: i32) -> bool;
    /// Conflicts so far (CDCL conflicts, theory ones included).
    fn conflicts(&self) -> u64;
}

/// CaDiCaL, optionally with a theory attached.
pub struct Cadical {
    solver: CaDiCal,
    vars: i32,
    has_theory: bool,
    poisoned: Rc<Cell<bool>>,
    terminate: TerminateFlag,
    deadline: Rc<Cell<Option<Instant>>>,
}

/// Stops CaDiCaL when the bridge is poisoned or the deadline has passed.
struct Stop {
    flag: TerminateFlag,
    deadline: Rc<Cell<Option<Instant>>>,
}

impl Terminator for Stop {
    fn terminated(&mut self) -> bool {
        self.flag.is_terminated() || self.deadline.get().is_some_and(|d| Instant::now() >= d)
    }
}

impl Cadical {
    /// A plain CaDiCaL solver, with no theory.
    pub fn new() -> Self {
        let terminate = TerminateFlag::new();
        let deadline = Rc::new(Cell::new(None));
        let mut solver = CaDiCal::new();
        solver.connect_terminator(Stop { flag: terminate.clone(), deadline: deadline.clone() });
        Cadical {
            solver,
            vars: 0,
            has_theory: false,
            poisoned: Rc::new(Cell::new(false)),
            terminate,
            deadline,
        }
    }

    /// Makes every later [`SatEngine::solve`] give up with [`SolverError::TimedOut`] once `deadline` passes.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline.set(deadline);
    }

    /// Connects `theory` as the external propagator. Call before [`SatEngine::observe`].
    pub fn attach_theory<T: Theory + 'static>(&mut self, theory: Rc<RefCell<T>>) {
        let bridge = Bridge {
            theory,
            poisoned: self.poisoned.clone(),
            terminate: self.terminate.clone(),
            reason: None,
            lemma: None,
        };
        self.solver.connect_external_propagator(bridge);
        self.has_theory = true;
    }
}

impl Default for Cadical {
    fn default() -> Self {
        Cadical::new()
    }
}

impl SatEngine for Cadical {
    fn new_var(&mut self) -> i32 {
        self.vars += 1;
        self.vars
    }

    fn add_clause(&mut self, lits: &[i32]) {
        for &l in lits {
            self.solver.add(l);
        }
        self.solver.add(0);
    }

    fn set_phase(&mut self, lit: i32) {
        self.solver.phase(lit);
    }

    fn observe(&mut self, var: i32) {
        if self.has_theory {
            self.solver.add_observed_var(var);
        }
    }

    fn solve(&mut self, assumptions: &[i32]) -> Result<SatResult, SolverError> {
        for &a in assumptions {
            self.solver.assume(a);
        }
        let status = self.solver.solve();
        if self.poisoned.get() {
            return Err(SolverError::Engine("the acyclicity propagator failed internally".into()));
        }
        match status {
            Status::SATISFIABLE => Ok(SatResult::Sat),
            Status::UNSATISFIABLE => Ok(SatResult::Unsat),
            Status::UNKNOWN if self.deadline.get().is_some_and(|d| Instant::now() >= d) => {
                Err(SolverError::TimedOut)
            }
            Status::UNKNOWN => Err(SolverError::Engine("CaDiCaL returned UNKNOWN".into())),
        }
    }

    fn value(&mut self, lit: i32) -> bool {
        self.solver.val(lit) > 0
    }

    fn failed(&mut self, lit: i32) -> bool {
        self.solver.failed(lit)
    }

    fn conflicts(&self) -> u64 {
        self.solver.get_statistic_value("conflicts").max(0) as u64
    }
}

/// Adapts a [`Theory`] to CaDiCaL's `ExternalPropagator`.
///
/// CaDiCaL calls these methods from C++ through `cxx`; a Rust panic there would abort the process. So every
/// call into the theory runs under `catch_unwind`. After a panic the bridge is poisoned: it stops calling the
/// theory, answers neutrally, and asks CaDiCaL to terminate; [`Cadical::solve`] then reports an error instead
/// of the (untrustworthy) result.
struct Bridge<T: Theory> {
    theory: Rc<RefCell<T>>,
    poisoned: Rc<Cell<bool>>,
    terminate: TerminateFlag,
    /// The reason clause being handed over, literal by literal: (propagated literal, clause, next index).
    reason: Option<(i32, Vec<i32>, usize)>,
    /// The lemma being handed over: (clause, next index).
    lemma: Option<(Vec<i32>, usize)>,
}

impl<T: Theory> Bridge<T> {
    /// Runs `f` on the theory unless poisoned; on a panic (or a re-entrant borrow), poisons and returns
    /// `default`.
    fn guard<R>(&mut self, default: R, f: impl FnOnce(&mut T) -> R) -> R {
        if self.poisoned.get() {
            return default;
        }
        let theory = &self.theory;
        let result = catch_unwind(AssertUnwindSafe(|| {
            let mut t = theory.try_borrow_mut().ok()?;
            Some(f(&mut t))
        }));
        match result {
            Ok(Some(r)) => r,
            _ => {
                self.poisoned.set(true);
                self.terminate.terminate();
                default
            }
        }
    }
}

impl<T: Theory> ExternalPropagator for Bridge<T> {
    fn notify_assignment(&mut self, lits: &[i32]) {
        self.guard((), |t| {
            for &l in lits {
                t.notify_assignment(l);
            }
        });
    }

    fn notify_new_decision_level(&mut self) {
        self.guard((), |t| t.notify_new_decision_level());
    }

    fn notify_backtrack(&mut self, new_level: usize) {
        self.guard((), |t| t.notify_backtrack(new_level));
    }

    fn cb_check_found_model(&mut self, model: &[i32]) -> bool {
        // When poisoned, accept: the solve call reports an error and the model is never used.
        self.guard(true, |t| t.check_model(model))
    }

    fn cb_propagate(&mut self) -> i32 {
        self.guard(0, |t| t.propagate().unwrap_or(0))
    }

    fn cb_add_reason_clause_lit(&mut self, propagated_lit: i32) -> i32 {
        if self.reason.as_ref().is_none_or(|(l, _, _)| *l != propagated_lit) {
            // A reason must contain the propagated literal. If the theory fails, hand over the unit clause:
            // the run is poisoned, and its result is discarded.
            let clause = self.guard(None, |t| t.reason(propagated_lit)).unwrap_or_else(|| {
                self.poisoned.set(true);
                self.terminate.terminate();
                vec![propagated_lit]
            });
            self.reason = Some((propagated_lit, clause, 0));
        }
        let Some((_, clause, next)) = self.reason.as_mut() else { return 0 };
        match clause.get(*next) {
            Some(&l) => {
                *next += 1;
                l
            }
            None => {
                self.reason = None;
                0
            }
        }
    }

    fn cb_has_external_clause(&mut self, is_forgettable: &mut bool) -> bool {
        *is_forgettable = false;
        if self.lemma.is_some() {
            return true;
        }
        match self.guard(None, |t| t.next_lemma()) {
            Some(c) => {
                self.lemma = Some((c, 0));
                true
            }
            None => false,
        }
    }

    fn cb_add_external_clause_lit(&mut self) -> i32 {
        let Some((clause, next)) = self.lemma.as_mut() else { return 0 };
        match clause.get(*next) {
            Some(&l) => {
                *next += 1;
                l
            }
            None => {
                self.lemma = None;
                0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A theory that panics on its first assignment.
    struct Exploding;

    impl Theory for Exploding {
        fn notify_assignment(&mut self, _lit: i32) {
            panic!("theory bug");
        }
        fn notify_new_decision_level(&mut self) {}
        fn notify_backtrack(&mut self, _new_level: usize) {}
        fn propagate(&mut self) -> Option<i32> {
            None
        }
        fn reason(&mut self, _lit: i32) -> Option<Vec<i32>> {
            None
        }
        fn next_lemma(&mut self) -> Option<Vec<i32>> {
            None
        }
        fn check_model(&mut self, _model: &[i32]) -> bool {
            true
        }
    }

    #[test]
    fn a_panicking_theory_becomes_an_error_not_an_abort() {
        let mut engine = Cadical::new();
        engine.attach_theory(Rc::new(RefCell::new(Exploding)));
        let (a, b) = (engine.new_var(), engine.new_var());
        engine.observe(a);
        engine.observe(b);
        engine.add_clause(&[a, b]);
        engine.add_clause(&[-a, b]);
        let result = engine.solve(&[]);
        assert!(matches!(result, Err(SolverError::Engine(_))), "{result:?}");
    }

    #[test]
    fn assumptions_and_failed_literals_round_trip() {
        let mut engine = Cadical::new();
        let (a, b) = (engine.new_var(), engine.new_var());
        engine.add_clause(&[-a, -b]);
        assert_eq!(engine.solve(&[a]).expect("solves"), SatResult::Sat);
        assert!(engine.value(a) && !engine.value(b));
        assert_eq!(engine.solve(&[a, b]).expect("solves"), SatResult::Unsat);
        assert!(engine.failed(a) || engine.failed(b));
    }
}
