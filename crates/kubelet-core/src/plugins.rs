//! The plugin manager's reconciler as a pure step (upstream's
//! pluginmanager/reconciler): the sockets found under
//! `<root-dir>/plugins_registry` (desired, each with its modification
//! time) against the plugins registered from them (actual).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// What the reconciler does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The socket is new (or was made again): register its plugin.
    Register(PathBuf),
    /// The socket is gone (or was made again): deregister the plugin
    /// registered from it.
    Deregister(PathBuf),
}

/// Deregistrations first, then registrations, each in path order: a
/// socket made again (a new timestamp) is deregistered, then registered.
pub fn reconcile(
    desired: &BTreeMap<PathBuf, i128>,
    actual: &BTreeMap<PathBuf, i128>,
) -> Vec<Action> {
    let stale = actual
        .iter()
        .filter(|(path, at)| desired.get(*path) != Some(*at))
        .map(|(path, _)| Action::Deregister(path.clone()));
    let new = desired
        .iter()
        .filter(|(path, at)| actual.get(*path) != Some(*at))
        .map(|(path, _)| Action::Register(path.clone()));
    stale.chain(new).collect()
}

#[cfg(test)]
mod tests;
