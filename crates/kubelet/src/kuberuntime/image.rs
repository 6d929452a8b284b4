//! Images (upstream's kuberuntime_image.go and the image manager): the pull
//! policy, who may use a pulled image, pull secrets and the pull back-off.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_core::credentials::{Credential, Keyring};
use kubelet_core::duration::format_go_duration;
use kubelet_core::pullrecords::{Check, ImagePullSecret, ImagePullServiceAccount};
use kubelet_core::reference::parse_normalized;
use kubelet_cri::client::CriError;
use kubelet_cri::v1 as cri;
use kubelet_tasks::blocking;

use super::RuntimeManager;
use crate::error::StartError;
use crate::events::{Involved, NORMAL, WARNING};

impl RuntimeManager {
    /// SyncPod's image step (upstream's EnsureImageExists) for `image`
    /// (a container's, or an image volume's reference): pull as its pull
    /// `policy` says, not while the image's last pull for this pod is in
    /// back-off; Ok is the image reference to create the container (or
    /// mount the volume) from.
    pub(super) async fn ensure_image(
        &self,
        pod: &Pod,
        image: &str,
        policy: Option<&str>,
        about: &Involved,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<String, StartError> {
        let failed = |reason, message, source| StartError::Image {
            reason,
            message,
            source,
        };
        if let Err(e) = parse_normalized(image) {
            // Upstream's applyDefaultImageTag failing.
            let message = format!("Failed to apply default image tag {image:?}: {e}");
            self.events
                .event(about, WARNING, "InspectFailed", message.clone());
            return Err(failed("InvalidImageName", message, None));
        }
        let policy = policy
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| pull_policy_default(image));
        let present = match self.cri.image_status(image).await {
            Ok(img) => img.map(|i| i.id),
            Err(e) => return Err(failed("ErrImageInspect", e.message.clone(), Some(e))),
        };
        if let Some(id) = present.filter(|_| policy != "Always")
            && !self.may_use(pod, image, &id).await?.must_pull()
        {
            self.events.event(
                about,
                NORMAL,
                "Pulled",
                format!(
                    "Container image {image:?} already present on machine and can be accessed by the pod"
                ),
            );
            return Ok(id);
        }
        if policy == "Never" {
            let message =
                format!("Container image {image:?} is not present with pull policy of Never");
            self.events
                .event(about, WARNING, "ErrImageNeverPull", message.clone());
            return Err(failed("ErrImageNeverPull", message, None));
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let in_backoff = self
            .pull_backoff
            .lock()
            .check(uid, image, self.clock.now_nanos());
        if let Err((left, message)) = in_backoff {
            self.events.event(
                about,
                NORMAL,
                "BackOff",
                format!("Back-off pulling image {image:?}"),
            );
            return Err(StartError::ImagePullBackOff { left, message });
        }
        self.pull(pod, image, about, sandbox_config)
            .await
            .inspect_err(|e| {
                let (reason, message) = (e.reason(), e.to_string());
                let mut backoff = self.pull_backoff.lock();
                backoff.failed(uid, image, self.clock.now_nanos(), reason, &message);
            })
    }

    /// The image volumes container `c` mounts, each pulled for `pod` as its
    /// `pullPolicy` says (its events on the pod, as upstream's
    /// getImageVolumes), by volume name: what the runtime mounts.
    pub(super) async fn image_volumes(
        &self,
        pod: &Pod,
        c: &Container,
        volumes: &crate::volumes::PodVolumes,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<HashMap<String, cri::ImageSpec>, StartError> {
        let mut out = HashMap::new();
        let about = Involved::pod(pod, None);
        let spec_volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
        for m in c.volume_mounts.iter().flatten() {
            let is_image = volumes
                .get(&m.name)
                .is_some_and(|v| v.form == crate::volumes::Form::Image);
            let source = spec_volumes
                .into_iter()
                .flatten()
                .find(|v| v.name == m.name)
                .and_then(|v| v.image.as_ref());
            let (true, Some(source)) = (is_image, source) else {
                continue;
            };
            if out.contains_key(&m.name) {
                continue;
            }
            let reference = source.reference.clone().unwrap_or_default();
            let image_ref = self
                .ensure_image(
                    pod,
                    &reference,
                    source.pull_policy.as_deref(),
                    &about,
                    sandbox_config,
                )
                .await?;
            out.insert(
                m.name.clone(),
                cri::ImageSpec {
                    image: image_ref,
                    user_specified_image: reference,
                    ..Default::default()
                },
            );
        }
        Ok(out)
    }

    /// Turn the pulls a previous run left unfinished into records of the
    /// images the runtime has (once the runtime is up).
    pub async fn adopt_left_pulls(&self) {
        match self.cri.list_images().await {
            Ok(images) => {
                let pulls = self.pulls.clone();
                let _ = blocking(move || {
                    pulls.adopt_left_intents(&images);
                    Ok(())
                })
                .await;
            }
            Err(e) => tracing::warn!(error = %e, "listing images for the image pull records"),
        }
    }

    /// Whether `pod` may use `image`, present as `image_ref`, without
    /// pulling it (upstream's MustAttemptImagePull): its pull secrets are
    /// read only when the records need them.
    async fn may_use(&self, pod: &Pod, image: &str, image_ref: &str) -> Result<Check, StartError> {
        let cached = match self.pulls.precheck(image, image_ref) {
            Ok(check) => return Ok(check),
            Err(cached) => cached,
        };
        let (creds, _) = self.credentials(pod, image).await?;
        let mine: Vec<ImagePullSecret> = creds.iter().filter_map(ImagePullSecret::of).collect();
        let account = creds.iter().find_map(ImagePullServiceAccount::of);
        let (pulls, image, image_ref) =
            (self.pulls.clone(), image.to_owned(), image_ref.to_owned());
        Ok(blocking(move || {
            Ok(pulls.check_pod(&image, &image_ref, &cached, &mine, account.as_ref()))
        })
        .await
        .unwrap_or(Check::Error))
    }

    /// The credentials to try for pulling `image` for `pod`, in upstream's
    /// order: those of the pod's imagePullSecrets, then the credential
    /// provider plugins'; and the names of the secrets that could not be
    /// read.
    async fn credentials(
        &self,
        pod: &Pod,
        image: &str,
    ) -> Result<(Vec<Credential>, Vec<String>), StartError> {
        let (secrets, missing) = self.env.pull_secrets(pod).await;
        let keyring =
            Keyring::from_secrets(secrets.iter().map(|s| s.as_ref())).map_err(|message| {
                StartError::Image {
                    reason: "ErrImagePull",
                    message: message.to_string(),
                    source: None,
                }
            })?;
        let mut creds = keyring.lookup(image);
        if let Some(plugins) = &self.plugins {
            creds.extend(plugins.lookup(image, pod).await);
        }
        Ok((creds, missing))
    }

    /// Pull `image` for a container (upstream's pullImage), with the
    /// credentials the pod's imagePullSecrets hold for its registry, then
    /// the credential provider plugins', each tried in turn (none: without), and its events: Pulling, then Pulled
    /// with the time it took and the image's size, or Failed with the
    /// runtime's error (and FailedToRetrieveImagePullSecret when some
    /// secrets could not be read). The pull is on record from its start,
    /// and its end records the credential that pulled the image.
    pub(super) async fn pull(
        &self,
        pod: &Pod,
        image: &str,
        about: &Involved,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<String, StartError> {
        let (creds, missing) = self.credentials(pod, image).await?;
        let creds: Vec<Option<Credential>> = match creds {
            creds if creds.is_empty() => vec![None],
            creds => creds.into_iter().map(Some).collect(),
        };
        tracing::info!(%image, credentials = creds.iter().flatten().count(), "pulling image");
        let (pulls, owned) = (self.pulls.clone(), image.to_owned());
        blocking(move || pulls.pull_started(&owned))
            .await
            .map_err(|e| StartError::Image {
                reason: "ErrImagePull",
                message: format!(
                    "Failed to record image pull intent for container image {image:?}: {e}"
                ),
                source: None,
            })?;
        let result = self.pull_with(image, &creds, about, sandbox_config).await;
        let (pulls, owned) = (self.pulls.clone(), image.to_owned());
        let pulled = result
            .as_ref()
            .ok()
            .map(|(r, used)| (r.clone(), used.cloned()));
        let _ = blocking(move || {
            match pulled {
                Some((image_ref, used)) => pulls.pulled(&owned, &image_ref, used.as_ref()),
                None => pulls.pull_failed(&owned),
            }
            Ok(())
        })
        .await;
        if result.is_err() && !missing.is_empty() {
            self.events.event(
                &Involved::pod(pod, None),
                WARNING,
                "FailedToRetrieveImagePullSecret",
                format!(
                    "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                    missing.join(", ")
                ),
            );
        }
        result.map(|(image_ref, _)| image_ref)
    }

    /// The pull itself, with each of `creds` in turn: Ok is the image
    /// reference and the credential that pulled it.
    async fn pull_with<'c>(
        &self,
        image: &str,
        creds: &'c [Option<Credential>],
        about: &Involved,
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<(String, Option<&'c Credential>), StartError> {
        self.events
            .event(about, NORMAL, "Pulling", format!("Pulling image {image:?}"));
        let asked = tokio::time::Instant::now();
        // The semaphore is never closed; a pull without a permit is not
        // possible, so waiting is the only outcome.
        let _permit = match &self.pull_slots {
            Some(slots) => slots.acquire().await.ok(),
            None => None,
        };
        let started = tokio::time::Instant::now();
        let mut errors = Vec::new();
        let mut pulled = None;
        // registryPullQPS: over the budget the pull fails at once (upstream's
        // throttled image service), and the back-off retries it.
        let throttled = self
            .pull_budget
            .as_ref()
            .is_some_and(|b| !b.lock().try_take(self.clock.now_nanos()));
        for cred in creds.iter().filter(|_| !throttled) {
            let auth = cred.as_ref().map(|c| cri::AuthConfig {
                username: c.username.clone(),
                password: c.password.clone(),
                ..Default::default()
            });
            match self
                .cri
                .pull_image(image, auth, Some(sandbox_config.clone()))
                .await
            {
                Ok(image_ref) => {
                    pulled = Some((image_ref, cred.as_ref()));
                    break;
                }
                Err(e) => errors.push(e),
            }
        }
        let Some((image_ref, used)) = pulled else {
            // Upstream's aggregate: one error as is, several in brackets.
            let texts: Vec<String> = errors.iter().map(CriError::grpc_text).collect();
            let message = match texts.as_slice() {
                _ if throttled => "pull QPS exceeded".to_owned(),
                [one] => one.clone(),
                many => format!("[{}]", many.join(", ")),
            };
            self.events.event(
                about,
                WARNING,
                "Failed",
                format!("Failed to pull image {image:?}: {message}"),
            );
            return Err(StartError::Image {
                reason: "ErrImagePull",
                message,
                source: errors.pop(),
            });
        };
        let ms = |d: Duration| format_go_duration(Duration::from_millis(d.as_millis() as u64));
        let (took, waited) = (ms(started.elapsed()), ms(asked.elapsed()));
        // The size as the runtime has it now (upstream reads it the same way).
        let size = match self.cri.image_status(&image_ref).await {
            Ok(Some(img)) => img.size,
            _ => 0,
        };
        self.events.event(
            about,
            NORMAL,
            "Pulled",
            format!(
                "Successfully pulled image {image:?} in {took} ({waited} including waiting). Image size: {size} bytes."
            ),
        );
        Ok((image_ref, used))
    }
}

pub(super) fn pull_policy_default(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || (last.contains(':') && !last.ends_with(":latest")) {
        "IfNotPresent"
    } else {
        "Always"
    }
}
