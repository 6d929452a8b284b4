use super::*;

#[test]
fn sockets_are_registered_once_and_again_when_remade() {
    let p = |s: &str| PathBuf::from(s);
    let map = |entries: &[(&str, i128)]| -> BTreeMap<PathBuf, i128> {
        entries.iter().map(|(k, v)| (p(k), *v)).collect()
    };
    let cases = [
        (map(&[]), map(&[]), vec![]),
        (
            map(&[("/r/a.sock", 1)]),
            map(&[]),
            vec![Action::Register(p("/r/a.sock"))],
        ),
        (map(&[("/r/a.sock", 1)]), map(&[("/r/a.sock", 1)]), vec![]),
        (
            map(&[]),
            map(&[("/r/a.sock", 1)]),
            vec![Action::Deregister(p("/r/a.sock"))],
        ),
        (
            map(&[("/r/a.sock", 2), ("/r/b.sock", 1)]),
            map(&[("/r/a.sock", 1), ("/r/c.sock", 1)]),
            vec![
                Action::Deregister(p("/r/a.sock")),
                Action::Deregister(p("/r/c.sock")),
                Action::Register(p("/r/a.sock")),
                Action::Register(p("/r/b.sock")),
            ],
        ),
    ];
    for (i, (desired, actual, want)) in cases.into_iter().enumerate() {
        assert_eq!(reconcile(&desired, &actual), want, "case {i}");
    }
}
