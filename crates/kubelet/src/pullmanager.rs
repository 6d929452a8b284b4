//! The image pull manager (upstream's images/pullmanager, with its
//! in-memory cache and file records in one): it remembers which images the
//! kubelet pulled and with which pull secrets, under
//! `<root-dir>/image_manager/pulling` (a pull begun) and `pulled` (an image
//! pulled, and who may use it), as upstream lays them out, and answers
//! whether a pod may use an image already on the node
//! (`kubelet_core::pullrecords` decides).
//!
//! Every record is kept in memory, read once at start, and written through
//! to its file (a temporary file renamed over it). The methods are
//! synchronous and take one lock for the whole of each; the ones that
//! write files are called through `spawn_blocking`. One lock, not
//! upstream's striped locks: every operation is a map lookup or one small
//! file, far shorter than the pulls between them.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use kubelet_core::credentials::Credential;
use kubelet_cri::v1 as cri;

use crate::files::{TMP_SUFFIX, write_file};
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::pullrecords::{
    self, Check, ImagePullCredentials, ImagePullIntent, ImagePullSecret, ImagePullServiceAccount,
    ImagePulledRecord, VerificationPolicy,
};

use crate::clock::Clock;

/// The two record directories.
#[derive(Debug)]
struct Dirs {
    pulling: PathBuf,
    pulled: PathBuf,
}

#[derive(Debug, Default)]
struct State {
    /// Pulls in flight per image (each has its intent file).
    in_flight: HashMap<String, u32>,
    /// Intents a previous run left: the image was being pulled when it
    /// stopped, so it counts as pulled by the kubelet.
    left_intents: HashSet<String>,
    /// Pulled records by image reference.
    records: HashMap<String, ImagePulledRecord>,
    /// The file names of pulled records that could not be read: an image
    /// whose record is among them is pulled again, to be safe.
    unreadable: HashSet<String>,
}

pub struct PullManager {
    /// None: the directories could not be made; records live in memory.
    dirs: Option<Dirs>,
    policy: VerificationPolicy,
    state: Mutex<State>,
    metrics: KubeletMetrics,
    clock: Clock,
}

impl PullManager {
    /// The records under `<root>/image_manager`, v1alpha1 ones rewritten
    /// in v1beta1 as upstream migrates them. Where the directories cannot
    /// be made, the records of this run are kept in memory only: pods are
    /// still checked, against what this run pulled.
    pub fn open(
        root: &Path,
        policy: VerificationPolicy,
        metrics: KubeletMetrics,
        clock: Clock,
    ) -> Self {
        let base = root.join("image_manager");
        let dirs = Dirs {
            pulling: base.join("pulling"),
            pulled: base.join("pulled"),
        };
        let made = [&dirs.pulling, &dirs.pulled]
            .into_iter()
            .try_for_each(|d| fs::DirBuilder::new().recursive(true).mode(0o700).create(d));
        let mut state = State::default();
        let dirs = match made {
            Ok(()) => {
                load(&dirs, &mut state);
                Some(dirs)
            }
            Err(e) => {
                tracing::error!(dir = %base.display(), error = %e, "image pull records kept in memory only");
                None
            }
        };
        let m = PullManager {
            dirs,
            policy,
            state: Mutex::new(state),
            metrics,
            clock,
        };
        m.update_sizes(&m.state.lock());
        m
    }

    fn update_sizes(&self, state: &State) {
        let intents = state.in_flight.len() + state.left_intents.len();
        self.metrics.pull_intents.set(&[], intents as f64);
        self.metrics
            .pulled_records
            .set(&[], state.records.len() as f64);
    }

    fn count(&self, check: Check) -> Check {
        self.metrics.mustpull_checks.inc(&[check.label()]);
        check
    }

    /// Whether a pod must pull `image` though `image_ref` is on the node,
    /// before its pull secrets are read: Ok is the decision, Err the
    /// credentials on record to match them against ([`Self::check_pod`]).
    pub fn precheck(&self, image: &str, image_ref: &str) -> Result<Check, ImagePullCredentials> {
        let state = self.state.lock();
        if !state.unreadable.is_empty()
            && state
                .unreadable
                .contains(&pullrecords::file_name(image_ref))
        {
            return Ok(self.count(Check::Error));
        }
        let record = state.records.get(image_ref);
        let pulled_by_kubelet = record.is_some()
            || state.in_flight.contains_key(image)
            || state.left_intents.contains(image);
        pullrecords::precheck(&self.policy, image, record, pulled_by_kubelet)
            .map(|c| self.count(c))
            .map_err(Clone::clone)
    }

    /// Whether one of the pod's pull secrets `pod` for `image` matches
    /// `cached` (a matching secret not yet on record is added to it), or
    /// else the pod's service account (`account`, a credential provider
    /// plugin's) is on record.
    pub fn check_pod(
        &self,
        image: &str,
        image_ref: &str,
        cached: &ImagePullCredentials,
        pod: &[ImagePullSecret],
        account: Option<&ImagePullServiceAccount>,
    ) -> Check {
        let (check, remember) = pullrecords::match_pod_secrets(cached, pod);
        let check = match account {
            Some(a)
                if check == Check::MustAuthenticate
                    && pullrecords::match_service_account(cached, a) =>
            {
                Check::CredentialRecordFound
            }
            _ => check,
        };
        if let Some(secret) = remember {
            let creds = ImagePullCredentials {
                kubernetes_secrets: vec![secret],
                ..Default::default()
            };
            if let Err(e) = self.grant(image, image_ref, Some(&creds)) {
                tracing::warn!(%image, error = %e, "writing an image pulled record");
            }
        }
        self.count(check)
    }

    /// A pull of `image` begins (upstream's RecordPullIntent).
    pub fn pull_started(&self, image: &str) -> io::Result<()> {
        let mut state = self.state.lock();
        if let Some(dirs) = &self.dirs {
            let file = dirs.pulling.join(pullrecords::file_name(image));
            write_file(&file, &pullrecords::encode(&ImagePullIntent::new(image)))?;
        }
        *state.in_flight.entry(image.to_owned()).or_default() += 1;
        self.update_sizes(&state);
        Ok(())
    }

    /// The pull of `image` gave `image_ref`, with `cred` (None: without
    /// credentials, so every pod may use it); upstream's RecordImagePulled.
    /// When the record cannot be written the intent stays, so the image
    /// still counts as the kubelet's.
    pub fn pulled(&self, image: &str, image_ref: &str, cred: Option<&Credential>) {
        let creds = ImagePullCredentials::pulled_with(cred);
        match self.grant(image, image_ref, Some(&creds)) {
            Ok(()) => self.pull_ended(image),
            Err(e) => tracing::error!(%image, error = %e, "writing an image pulled record"),
        }
    }

    /// The pull of `image` failed (upstream's RecordImagePullFailed).
    pub fn pull_failed(&self, image: &str) {
        self.pull_ended(image);
    }

    /// One pull of `image` fewer in flight; the intent goes with the last.
    fn pull_ended(&self, image: &str) {
        let mut state = self.state.lock();
        let left = state.in_flight.get(image).copied().unwrap_or(0);
        if left <= 1 {
            if let Some(dirs) = &self.dirs {
                let file = dirs.pulling.join(pullrecords::file_name(image));
                if let Err(e) = remove_file(&file) {
                    tracing::error!(%image, error = %e, "removing an image pull intent");
                    return;
                }
            }
            state.in_flight.remove(image);
            state.left_intents.remove(image);
        } else {
            state.in_flight.insert(image.to_owned(), left - 1);
        }
        self.update_sizes(&state);
    }

    /// Record `image_ref` as pulled for `image` with `creds` added (None:
    /// only that the kubelet pulled it; upstream's
    /// writePulledRecordIfChanged).
    fn grant(
        &self,
        image: &str,
        image_ref: &str,
        creds: Option<&ImagePullCredentials>,
    ) -> Result<(), String> {
        let name = pullrecords::image_without_tag(image)
            .map_err(|e| format!("invalid image name {image:?}: {e}"))?;
        let mut state = self.state.lock();
        let now = self.clock.now_time();
        let updated = match (state.records.get(image_ref), creds) {
            (None, creds) => {
                let mut r = ImagePulledRecord::new(image_ref, now);
                if let Some(c) = creds {
                    r.credential_mapping.insert(name, c.clone());
                }
                r
            }
            (Some(_), None) => return Ok(()),
            (Some(old), Some(c)) => match pullrecords::merge(old, &name, c, now) {
                Some(r) => r,
                None => return Ok(()),
            },
        };
        let file_name = pullrecords::file_name(image_ref);
        if let Some(dirs) = &self.dirs {
            write_file(
                &dirs.pulled.join(&file_name),
                &pullrecords::encode(&updated),
            )
            .map_err(|e| e.to_string())?;
        }
        state.unreadable.remove(&file_name);
        state.records.insert(image_ref.to_owned(), updated);
        self.update_sizes(&state);
        Ok(())
    }

    /// Turn the intents a previous run left into pulled records (with no
    /// credentials, so every pod must verify) for the images the runtime
    /// has (upstream's initialize).
    pub fn adopt_left_intents(&self, images: &[cri::Image]) {
        let left: Vec<String> = self.state.lock().left_intents.iter().cloned().collect();
        for image in left {
            let Some(found) = images
                .iter()
                .find(|i| i.repo_digests.contains(&image) || i.repo_tags.contains(&image))
            else {
                continue;
            };
            if let Err(e) = self.grant(&image, &found.id, None) {
                tracing::warn!(%image, error = %e, "writing an image pulled record");
                continue;
            }
            self.pull_ended(&image);
        }
    }

    /// Remove the records of images not in `remaining` last updated before
    /// `until`, when image GC began (upstream's PruneUnknownRecords).
    pub fn prune(
        &self,
        remaining: &HashSet<String>,
        until: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    ) {
        let mut state = self.state.lock();
        let gone: Vec<String> = state
            .records
            .values()
            .filter(|r| r.last_updated_time < *until && !remaining.contains(&r.image_ref))
            .map(|r| r.image_ref.clone())
            .collect();
        for image_ref in gone {
            if let Some(dirs) = &self.dirs {
                let file = dirs.pulled.join(pullrecords::file_name(&image_ref));
                if let Err(e) = remove_file(&file) {
                    tracing::warn!(%image_ref, error = %e, "removing an image pulled record");
                    continue;
                }
            }
            state.records.remove(&image_ref);
        }
        self.update_sizes(&state);
    }
}

/// Read both directories into `state`, rewriting old versions.
fn load(dirs: &Dirs, state: &mut State) {
    for (file, bytes) in record_files(&dirs.pulling) {
        match pullrecords::decode_intent(&bytes) {
            Ok((intent, current)) => {
                if !current && let Err(e) = write_file(&file, &pullrecords::encode(&intent)) {
                    tracing::warn!(file = %file.display(), error = %e, "migrating an image pull intent");
                }
                state.left_intents.insert(intent.image);
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "unreadable image pull intent")
            }
        }
    }
    for (file, bytes) in record_files(&dirs.pulled) {
        match pullrecords::decode_record(&bytes) {
            Ok((record, current)) => {
                if !current && let Err(e) = write_file(&file, &pullrecords::encode(&record)) {
                    tracing::warn!(file = %file.display(), error = %e, "migrating an image pulled record");
                }
                state.records.insert(record.image_ref.clone(), record);
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "unreadable image pulled record");
                if let Some(name) = file.file_name() {
                    state.unreadable.insert(name.to_string_lossy().into_owned());
                }
            }
        }
    }
}

/// The record files of `dir` and their contents: `sha256-` names, not
/// temporary files, not directories.
fn record_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("sha256-") && !name.ends_with(TMP_SUFFIX)
        })
        .filter_map(|e| fs::read(e.path()).ok().map(|b| (e.path(), b)))
        .collect()
}

fn remove_file(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_core::credentials::{CredentialSource, ObjectCoordinates};

    fn coordinates(name: &str) -> ObjectCoordinates {
        ObjectCoordinates {
            uid: format!("{name}-uid"),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn cred(secret: &str) -> Credential {
        Credential {
            username: "u".into(),
            password: "p".into(),
            email: String::new(),
            source: CredentialSource::Secret(coordinates(secret)),
        }
    }

    fn open(root: &Path) -> PullManager {
        PullManager::open(
            root,
            VerificationPolicy::NeverVerifyPreloadedImages,
            KubeletMetrics::new("n"),
            Clock::System,
        )
    }

    /// A private image pulled with a secret: a pod with the same secret
    /// may use it, one without must pull; the records survive a restart,
    /// and an intent a killed kubelet left makes the image the kubelet's.
    #[test]
    fn records_decide_who_may_use_an_image_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let image = "r.test/private/app:1";
        let m = open(dir.path());
        assert_eq!(
            m.precheck(image, "sha256:a"),
            Ok(Check::CredentialPolicyAllowed),
            "preloaded"
        );
        m.pull_started(image).unwrap();
        assert_eq!(m.metrics.pull_intents.get(&[]), 1.0);
        m.pulled(image, "sha256:a", Some(&cred("regcred")));
        assert_eq!(m.metrics.pull_intents.get(&[]), 0.0);
        assert_eq!(m.metrics.pulled_records.get(&[]), 1.0);
        let check = |m: &PullManager, pod: &[ImagePullSecret]| match m.precheck(image, "sha256:a") {
            Ok(c) => c,
            Err(cached) => m.check_pod(image, "sha256:a", &cached, pod, None),
        };
        let mine = ImagePullSecret::of(&cred("regcred")).unwrap();
        assert_eq!(
            check(&m, std::slice::from_ref(&mine)),
            Check::CredentialRecordFound
        );
        assert_eq!(check(&m, &[]), Check::MustAuthenticate);
        let pulled = dir
            .path()
            .join("image_manager/pulled")
            .join(pullrecords::file_name("sha256:a"));
        let text = fs::read_to_string(&pulled).unwrap();
        assert!(text.contains(r#""credentialMapping":{"r.test/private/app":{"kubernetesSecrets":[{"uid":"regcred-uid","namespace":"default","name":"regcred","credentialHash":""#), "{text}");

        // Another pull begins and the kubelet is killed.
        m.pull_started("r.test/other:1").unwrap();
        drop(m);
        let m = open(dir.path());
        assert_eq!(check(&m, &[mine]), Check::CredentialRecordFound);
        assert_eq!(check(&m, &[]), Check::MustAuthenticate);
        assert_eq!(
            m.precheck("r.test/other:1", "sha256:b"),
            Ok(Check::MustAuthenticate),
            "the left intent"
        );
        m.adopt_left_intents(&[cri::Image {
            id: "sha256:b".into(),
            repo_tags: vec!["r.test/other:1".into()],
            ..Default::default()
        }]);
        assert!(
            fs::read_dir(dir.path().join("image_manager/pulling"))
                .unwrap()
                .next()
                .is_none()
        );
        assert_eq!(
            m.precheck("r.test/other:1", "sha256:b"),
            Ok(Check::MustAuthenticate),
            "no credentials on record"
        );
        // Pruned once GC removed the image; the one still there stays.
        let later = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(m.clock.now_time().0.as_second() + 5)
                .unwrap(),
        );
        m.prune(&HashSet::from(["sha256:a".to_owned()]), &later);
        assert_eq!(m.metrics.pulled_records.get(&[]), 1.0);
        assert!(pulled.exists());
        assert_eq!(
            m.metrics.mustpull_checks.get(&["mustAuthenticate"]),
            3.0,
            "since the restart"
        );
    }

    /// An image a credential provider plugin pulled with a pod's service
    /// account token: pods of that account may use it, others pull; one a
    /// node plugin pulled is open to every pod, as upstream records them.
    #[test]
    fn plugin_pulls_are_recorded_by_service_account_or_for_the_node() {
        let dir = tempfile::tempdir().unwrap();
        let m = open(dir.path());
        let image = "r.test/private/app:1";
        let by_account = Credential {
            source: CredentialSource::ServiceAccount(coordinates("builder")),
            ..cred("x")
        };
        m.pull_started(image).unwrap();
        m.pulled(image, "sha256:a", Some(&by_account));
        let account = ImagePullServiceAccount::of(&by_account).unwrap();
        let check = |a: Option<&ImagePullServiceAccount>| match m.precheck(image, "sha256:a") {
            Ok(c) => c,
            Err(cached) => m.check_pod(image, "sha256:a", &cached, &[], a),
        };
        assert_eq!(check(Some(&account)), Check::CredentialRecordFound);
        let other = ImagePullServiceAccount {
            name: "other".into(),
            ..account.clone()
        };
        assert_eq!(check(Some(&other)), Check::MustAuthenticate);
        assert_eq!(check(None), Check::MustAuthenticate);
        let node = Credential {
            source: CredentialSource::Node,
            ..cred("x")
        };
        m.pull_started("r.test/public:1").unwrap();
        m.pulled("r.test/public:1", "sha256:b", Some(&node));
        assert_eq!(
            m.precheck("r.test/public:1", "sha256:b"),
            Ok(Check::CredentialRecordFound)
        );
    }

    /// An unreadable record forces a pull; an anonymous pull opens the
    /// image to every pod.
    #[test]
    fn unreadable_records_force_a_pull_and_anonymous_pulls_are_open() {
        let dir = tempfile::tempdir().unwrap();
        let pulled = dir.path().join("image_manager/pulled");
        fs::create_dir_all(&pulled).unwrap();
        fs::write(
            pulled.join(pullrecords::file_name("sha256:bad")),
            "{not json",
        )
        .unwrap();
        let m = open(dir.path());
        assert_eq!(m.precheck("r.test/a:1", "sha256:bad"), Ok(Check::Error));
        m.pull_started("r.test/a:1").unwrap();
        m.pulled("r.test/a:1", "sha256:bad", None);
        assert_eq!(
            m.precheck("r.test/a:1", "sha256:bad"),
            Ok(Check::CredentialRecordFound)
        );
    }
}
