//! `rea next`: fire instants as a user sees them.

use crate::support::Env;

fn next(args: &[&str]) -> String {
    let env = Env::new();
    let mut all = vec!["next"];
    all.extend_from_slice(args);
    let out = env.rea(&all);
    out.ok();
    out.stdout
}

#[test]
fn new_york_spring_forward_fixed_job() {
    assert_eq!(
        next(&[
            "30 2 * * *",
            "--tz",
            "America/New_York",
            "--after",
            "2026-03-07T12:00:00Z",
            "-n",
            "2"
        ]),
        "2026-03-08T03:00:00-04:00\n2026-03-09T02:30:00-04:00\n"
    );
}
