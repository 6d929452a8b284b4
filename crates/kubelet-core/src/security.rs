//! The security context a container runs with (upstream's `securitycontext`
//! and kuberuntime's checks). So far: runAsNonRoot verified against the
//! user the image runs as.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::dns::format_pod;

/// Whether `c` runs with runAsNonRoot (its own setting, else the pod's).
pub fn wants_non_root(pod: &Pod, c: &Container) -> bool {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    c.security_context
        .as_ref()
        .and_then(|s| s.run_as_non_root)
        .or_else(|| psc.and_then(|p| p.run_as_non_root))
        .unwrap_or(false)
}

/// Upstream's verifyRunAsNonRoot. With runAsNonRoot (the container's, else
/// the pod's), an explicit runAsUser 0 is refused; without a runAsUser,
/// the image's user must be numeric and not 0 (`image_uid` and
/// `image_user` as the runtime's ImageStatus gives them; neither means
/// root).
pub fn verify_run_as_non_root(
    pod: &Pod,
    c: &Container,
    image_uid: Option<i64>,
    image_user: &str,
) -> Result<(), String> {
    if !wants_non_root(pod, c) {
        return Ok(());
    }
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let sc = c.security_context.as_ref();
    let (pod_name, name) = (format_pod(pod), &c.name);
    let run_as = sc
        .and_then(|s| s.run_as_user)
        .or_else(|| psc.and_then(|p| p.run_as_user));
    if let Some(uid) = run_as {
        if uid == 0 {
            return Err(format!(
                "container's runAsUser breaks non-root policy (pod: {pod_name:?}, container: {name})"
            ));
        }
        return Ok(());
    }
    let uid = match (image_uid, image_user) {
        (None, user) if !user.is_empty() => {
            return Err(format!(
                "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root (pod: {pod_name:?}, container: {name})"
            ));
        }
        (None, _) => 0,
        (Some(uid), _) => uid,
    };
    if uid == 0 {
        return Err(format!(
            "container has runAsNonRoot and image will run as root (pod: {pod_name:?}, container: {name})"
        ));
    }
    if !(0..=i64::from(i32::MAX)).contains(&uid) {
        return Err(format!(
            "container has runAsNonRoot and image has an invalid user id ({uid}). (Must be 1-({})): must be between 0 and {}, inclusive (pod: {pod_name:?}, container: {name})",
            i32::MAX,
            i32::MAX
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSecurityContext, PodSpec, SecurityContext};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(pod_sc: Option<PodSecurityContext>, sc: Option<SecurityContext>) -> (Pod, Container) {
        let c = Container {
            name: "c".into(),
            security_context: sc,
            ..Default::default()
        };
        let p = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                security_context: pod_sc,
                containers: vec![c.clone()],
                ..Default::default()
            }),
            ..Default::default()
        };
        (p, c)
    }

    fn sc(non_root: Option<bool>, user: Option<i64>) -> Option<SecurityContext> {
        Some(SecurityContext {
            run_as_non_root: non_root,
            run_as_user: user,
            ..Default::default()
        })
    }

    #[test]
    fn run_as_non_root_is_verified_as_upstream() {
        let pod_level = Some(PodSecurityContext {
            run_as_non_root: Some(true),
            ..Default::default()
        });
        type Case<'a> = (
            Option<PodSecurityContext>,
            Option<SecurityContext>,
            Option<i64>,
            &'a str,
            Option<&'a str>,
        );
        let cases: Vec<Case> = vec![
            (None, None, Some(0), "", None),
            (None, sc(Some(false), None), Some(0), "", None),
            (None, sc(Some(true), Some(1000)), Some(0), "", None),
            (
                None,
                sc(Some(true), Some(0)),
                Some(1000),
                "",
                Some(
                    "container's runAsUser breaks non-root policy (pod: \"p_ns(u)\", container: c)",
                ),
            ),
            (
                None,
                sc(Some(true), None),
                Some(0),
                "",
                Some(
                    "container has runAsNonRoot and image will run as root (pod: \"p_ns(u)\", container: c)",
                ),
            ),
            // No user in the image is root.
            (
                None,
                sc(Some(true), None),
                None,
                "",
                Some("image will run as root"),
            ),
            (
                None,
                sc(Some(true), None),
                None,
                "nobody",
                Some("image has non-numeric user (nobody), cannot verify user is non-root"),
            ),
            (None, sc(Some(true), None), Some(1234), "", None),
            (
                None,
                sc(Some(true), None),
                Some(1 << 40),
                "",
                Some("invalid user id (1099511627776)"),
            ),
            // The pod's setting, and the container's over it.
            (
                pod_level.clone(),
                None,
                Some(0),
                "",
                Some("image will run as root"),
            ),
            (pod_level.clone(), sc(Some(false), None), Some(0), "", None),
            (pod_level, sc(None, Some(5)), Some(0), "", None),
        ];
        for (i, (psc, csc, uid, user, want)) in cases.into_iter().enumerate() {
            let (p, c) = pod(psc, csc);
            let got = verify_run_as_non_root(&p, &c, uid, user);
            match want {
                None => assert_eq!(got, Ok(()), "case {i}"),
                Some(m) => assert!(
                    got.as_ref().is_err_and(|e| e.contains(m)),
                    "case {i}: {got:?}"
                ),
            }
        }
    }
}
