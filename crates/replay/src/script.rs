//! Stage 4: the replay as files a person can read and run by hand (`krait report replay ID --out DIR`):
//! - `setup.sql`: the scratch schema and the rows at their values before the first step;
//! - `session-S1.sql`, …: each session's steps, in its own order, inside the recorded transaction boundaries;
//! - `interleaving.txt`: every step of every session in the order that produced the anomaly; run each
//!   session's script in its own `psql` and step through them in that order;
//! - `cleanup.sql`: drops the scratch schema.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::plan::ReplayPlan;
use crate::setup::{Scratch, Setup};
use crate::sql::{SqlError, TableMap, quote_ident, render_steps};

/// A plan made concrete for one place to run: the set-up, each step's SQL, and the notes on both.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The set-up.
    pub setup: Setup,
    /// Each step's SQL, in the plan's order.
    pub sql: Vec<String>,
    /// What a person should know about how faithful the replay is (the plan's, the set-up's, the SQL's).
    pub notes: Vec<String>,
}

impl Prepared {
    /// `plan`, to run in `scratch`.
    pub fn new(plan: &ReplayPlan, scratch: &Scratch) -> Result<Prepared, SqlError> {
        let setup = Setup::new(plan, scratch);
        let (sql, sql_notes) = render_steps(plan, &scratch.map)?;
        let notes = plan.notes.iter().chain(&setup.notes).cloned().chain(sql_notes).collect();
        Ok(Prepared { setup, sql, notes })
    }

    /// `plan`, to run on the recorded tables of a target that already holds the rows at their values
    /// before the first step: no set-up.
    pub fn preloaded(plan: &ReplayPlan) -> Result<Prepared, SqlError> {
        let (sql, sql_notes) = render_steps(plan, &TableMap::default())?;
        let notes = plan.notes.iter().cloned().chain(sql_notes).collect();
        Ok(Prepared { setup: Setup::default(), sql, notes })
    }
}

/// The files of a replay, by name, with their contents.
pub fn files(plan: &ReplayPlan, prepared: &Prepared) -> Vec<(String, String)> {
    let Prepared { setup, sql, notes } = prepared;
    let mut out = Vec::new();
    let classes: Vec<&str> = plan.report.anomalies.iter().map(|a| a.class.name()).collect();
    let mut header = format!(
        "-- Replay of Krait report {} ({}), checked at {}.\n",
        plan.report_id,
        classes.join(", "),
        plan.report.level.name()
    );
    for note in notes {
        let _ = writeln!(header, "-- note: {note}");
    }

    let mut setup_sql = format!("{header}-- Run straight against the database, before the sessions.\n");
    for s in &setup.statements {
        let _ = writeln!(setup_sql, "{s};");
    }
    out.push(("setup.sql".to_owned(), setup_sql));

    for i in 0..plan.sessions.len() {
        let mut script = format!(
            "{header}-- Session {}. Run it in its own connection, one step at a time, in the order\n\
             -- interleaving.txt gives.\n",
            plan.session_label(i)
        );
        for (n, step) in plan.steps.iter().enumerate() {
            if plan.session_of[step.txn] == i {
                let _ = writeln!(script, "-- step {} ({})\n{};", n + 1, plan.label(step.txn), sql[n]);
            }
        }
        out.push((format!("session-{}.sql", plan.session_label(i)), script));
    }

    let mut order = header.replace("-- ", "# ");
    order.push_str("# step  session  transaction  statement\n");
    for (n, step) in plan.steps.iter().enumerate() {
        let _ = writeln!(
            order,
            "{:>6}  {:<7}  {:<11}  {}",
            n + 1,
            plan.session_label(plan.session_of[step.txn]),
            plan.label(step.txn),
            sql[n]
        );
    }
    out.push(("interleaving.txt".to_owned(), order));

    if let Some(schema) = &setup.schema {
        out.push((
            "cleanup.sql".to_owned(),
            format!("DROP SCHEMA IF EXISTS {} CASCADE;\n", quote_ident(schema)),
        ));
    }
    out
}

/// Writes the replay's files into `dir` (made if missing) and returns their paths.
pub fn write(dir: &Path, plan: &ReplayPlan, prepared: &Prepared) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for (name, contents) in files(plan, prepared) {
        let path = dir.join(name);
        std::fs::write(&path, contents)?;
        written.push(path);
    }
    Ok(written)
}
