//! The volume manager on a real file system (tmpfs and bind mounts need
//! root: without it those tests say so and pass).

use k8s_openapi::api::core::v1::{
    DownwardAPIVolumeFile, DownwardAPIVolumeSource, EmptyDirVolumeSource, HostPathVolumeSource,
    ObjectFieldSelector, PersistentVolumeClaimVolumeSource,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::clock::Clock;
use crate::nodestatus::NodeAllocatable;
use kubelet_core::downward::Allocatable;
use kubelet_core::testing::PodBuilder;
use tokio::sync::watch;

fn root() -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!("skipped: mounting needs root");
    }
    root
}

fn manager(
    dir: &Path,
) -> (
    VolumeManager,
    tokio::sync::mpsc::Receiver<k8s_openapi::api::core::v1::Event>,
) {
    let (events, rx) = Recorder::with_queue("node".into(), Clock::System);
    let m = VolumeManager::new(
        dir.join("pods"),
        NodeAllocatable::new(
            Allocatable {
                cpu_millis: 2000,
                memory_bytes: 1 << 30,
                ephemeral_storage_bytes: 0,
            },
            watch::channel(None).1,
        ),
        None,
        events,
    );
    (m, rx)
}

fn volume(name: &str, f: impl FnOnce(&mut Volume)) -> Volume {
    let mut v = Volume {
        name: name.into(),
        ..Default::default()
    };
    f(&mut v);
    v
}

fn pod(uid: &str, volumes: Vec<Volume>) -> Pod {
    PodBuilder::new("web")
        .namespace("ns")
        .uid(uid)
        .label("app", "web")
        .volumes(volumes)
        .build()
}

fn mounts_in(dir: &Path) -> usize {
    mount::mounts_under(dir).unwrap().len()
}

#[tokio::test]
async fn volumes_are_set_up_once_and_torn_down_without_a_trace() {
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("host/made");
    let (m, _events) = manager(tmp.path());
    let p = pod(
        "u-1",
        vec![
            volume("scratch", |_| {}),
            volume("mem", |v| {
                v.empty_dir = Some(EmptyDirVolumeSource {
                    medium: Some("Memory".into()),
                    size_limit: Some(Quantity("1Mi".into())),
                    mode: Some(0o1770),
                })
            }),
            volume("info", |v| {
                v.downward_api = Some(DownwardAPIVolumeSource {
                    items: Some(vec![DownwardAPIVolumeFile {
                        path: "labels".into(),
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.labels".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                })
            }),
            volume("host", |v| {
                v.host_path = Some(HostPathVolumeSource {
                    path: host.display().to_string(),
                    type_: Some("DirectoryOrCreate".into()),
                })
            }),
        ],
    );
    let pod_dir = tmp.path().join("pods/u-1");
    let got = m.mount_pod(&p).await.unwrap();
    assert_eq!(
        got["scratch"].host_path,
        pod_dir.join("volumes/kubernetes.io~empty-dir/scratch")
    );
    assert!(!got["scratch"].read_only && got["info"].read_only);
    assert_eq!(got["host"].host_path, host);
    assert!(host.is_dir(), "DirectoryOrCreate made the host path");
    let info = std::fs::read_to_string(got["info"].host_path.join("labels")).unwrap();
    assert_eq!(info, "app=\"web\"");
    assert!(
        pod_dir
            .join("plugins/kubernetes.io~empty-dir/scratch/ready")
            .exists()
    );
    // The memory emptyDir and the downwardAPI volume are tmpfs; the first
    // sized by its sizeLimit.
    assert_eq!(mounts_in(&pod_dir), 2);
    let st = rustix::fs::statvfs(&got["mem"].host_path).unwrap();
    assert_eq!(st.f_blocks * st.f_frsize, 1 << 20);
    // emptyDir.mode, the sticky bit too; else 0777.
    let mode = |p: &Path| rustix::fs::stat(p).unwrap().st_mode & 0o7777;
    assert_eq!(mode(&got["mem"].host_path), 0o1770);
    assert_eq!(mode(&got["scratch"].host_path), 0o777);
    // A tmpfs no mode was asked for keeps the kernel's 1777, as upstream's.
    assert_eq!(mode(&got["info"].host_path), 0o1777);

    // Again (a resync, or a restart after a kill -9): nothing more.
    m.mount_pod(&p).await.unwrap();
    assert_eq!(mounts_in(&pod_dir), 2);

    m.unmount_pod(&PodUid::from("u-1")).await.unwrap();
    assert_eq!(mounts_in(&pod_dir), 0);
    assert!(!pod_dir.join("volumes").exists());
    assert!(host.is_dir(), "a hostPath is the host's, never removed");
    m.unmount_pod(&PodUid::from("u-1")).await.unwrap();
    m.remove_pod_dir(&PodUid::from("u-1")).await.unwrap();
    assert!(!pod_dir.exists());
}

#[tokio::test]
async fn a_volume_that_cannot_be_set_up_is_named_in_an_event() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, mut events) = manager(tmp.path());
    let p = pod(
        "u-2",
        vec![
            volume("claim", |v| {
                v.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
                    claim_name: "data".into(),
                    ..Default::default()
                })
            }),
            volume("sock", |v| {
                v.host_path = Some(HostPathVolumeSource {
                    path: tmp.path().display().to_string(),
                    type_: Some("Socket".into()),
                })
            }),
            volume("ok", |_| {}),
        ],
    );
    let e = m.mount_pod(&p).await.unwrap_err();
    let names: Vec<&str> = e.failed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["claim", "sock"]);
    let mut messages = Vec::new();
    while let Ok(ev) = events.try_recv() {
        assert_eq!(ev.reason.as_deref(), Some(FAILED_MOUNT));
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
        messages.push(ev.message.unwrap_or_default());
    }
    assert_eq!(
        messages,
        [
            "MountVolume.SetUp failed for volume \"claim\" : persistentVolumeClaim \"data\": a pod without an API server cannot reference one".to_owned(),
            format!(
                "MountVolume.SetUp failed for volume \"sock\" : hostPath type check failed: {} is not a socket file, it's a Directory",
                tmp.path().display()
            ),
        ]
    );
}

#[test]
fn host_path_types_are_checked_as_upstream_checks_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let file = tmp.path().join("f");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(&file, "").unwrap();
    let missing = tmp.path().join("missing");
    let cases: [(&Path, &str, Option<&str>); 10] = [
        (&dir, "", None),
        (&missing, "", None),
        (&dir, "Directory", None),
        (&file, "Directory", Some("is not a directory, it's a File")),
        (
            &missing,
            "Directory",
            Some("is not a directory, unable to determine its type"),
        ),
        (&file, "File", None),
        (&dir, "File", Some("is not a file, it's a Directory")),
        (
            &dir,
            "BlockDevice",
            Some("is not a block device, it's a Directory"),
        ),
        (Path::new("/dev/null"), "CharDevice", None),
        (&dir, "Weird", Some("Weird is an invalid volume type")),
    ];
    for (path, kind, want) in cases {
        match (check_host_path(path, kind), want) {
            (Ok(()), None) => {}
            (Err(e), Some(w)) => assert!(e.to_string().contains(w), "{path:?} {kind}: {e}"),
            (got, want) => panic!("{path:?} {kind}: {got:?}, want {want:?}"),
        }
    }
    let made = tmp.path().join("new-file");
    check_host_path(&made, "FileOrCreate").unwrap();
    assert!(made.is_file());
    check_host_path(&made, "FileOrCreate").unwrap();
    let err = check_host_path(&dir, "FileOrCreate").unwrap_err();
    assert!(
        matches!(
            err,
            HostPathError::Mismatch {
                expected: "file",
                found: "Directory",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn sub_paths_never_lead_out_of_their_volume() {
    if !root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    let secret = tmp.path().join("secret");
    std::fs::create_dir_all(vol.join("..data")).unwrap();
    std::fs::write(vol.join("..data/key"), "inside").unwrap();
    std::fs::write(&secret, "outside").unwrap();
    std::os::unix::fs::symlink("..data/key", vol.join("key")).unwrap();
    std::os::unix::fs::symlink(&secret, vol.join("escape")).unwrap();
    std::os::unix::fs::symlink("/", vol.join("root")).unwrap();
    let targets = tmp.path().join("subpaths");

    // A symlink that stays inside (a configMap's key) is followed.
    let t = subpath::prepare(&vol, "key", &targets.join("0")).unwrap();
    assert_eq!(std::fs::read_to_string(&t).unwrap(), "inside");
    // Again: the same mount, not a second one.
    subpath::prepare(&vol, "key", &targets.join("0")).unwrap();
    assert_eq!(mounts_in(&targets), 1);
    // Symlinks out of the volume are refused, at the end and on the way.
    for bad in ["escape", "root/etc"] {
        let e = subpath::prepare(&vol, bad, &targets.join(bad.replace('/', "-"))).unwrap_err();
        assert!(
            e.to_string().contains("not within volume path"),
            "{bad}: {e}"
        );
    }
    // A missing directory is made inside the volume, with the volume's
    // mode whatever the umask.
    std::fs::set_permissions(&vol, std::os::unix::fs::PermissionsExt::from_mode(0o2777)).unwrap();
    let made = subpath::prepare(&vol, "new/dir", &targets.join("1")).unwrap();
    assert!(made.is_dir() && vol.join("new/dir").is_dir());
    for d in ["new", "new/dir"] {
        assert_eq!(
            rustix::fs::stat(vol.join(d)).unwrap().st_mode & 0o7777,
            0o2777,
            "{d}"
        );
    }
    mount::unmount_all_under(&targets).unwrap();
    assert_eq!(mounts_in(&targets), 0);
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "outside");
}

#[tokio::test]
async fn fs_group_owns_new_volumes_once() {
    if !root() {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let (m, _events) = manager(tmp.path());
    let mut p = pod(
        "u-3",
        vec![
            volume("scratch", |_| {}),
            volume("info", |v| {
                v.downward_api = Some(DownwardAPIVolumeSource {
                    items: Some(vec![DownwardAPIVolumeFile {
                        path: "name".into(),
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.name".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                    default_mode: Some(0o400),
                    ..Default::default()
                })
            }),
        ],
    );
    p.spec.as_mut().unwrap().security_context =
        Some(k8s_openapi::api::core::v1::PodSecurityContext {
            fs_group: Some(2345),
            ..Default::default()
        });
    let got = m.mount_pod(&p).await.unwrap();
    let scratch = std::fs::metadata(&got["scratch"].host_path).unwrap();
    assert_eq!(scratch.gid(), 2345);
    assert_eq!(scratch.mode() & 0o2070, 0o2070, "setgid and group rwx");
    // A read-only volume's files get group read, not write.
    let name = std::fs::metadata(got["info"].host_path.join("name")).unwrap();
    assert_eq!((name.gid(), name.mode() & 0o777), (2345, 0o440));
    // Set up again, an emptyDir's files (a container's) are left alone.
    let later = got["scratch"].host_path.join("later");
    std::fs::write(&later, "x").unwrap();
    std::os::unix::fs::lchown(&later, None, Some(0)).unwrap();
    m.mount_pod(&p).await.unwrap();
    assert_eq!(std::fs::metadata(&later).unwrap().gid(), 0);
    m.unmount_pod(&PodUid::from("u-3")).await.unwrap();
}
