//! End-to-end tests of the process node on a private local control plane (needs root).
// Test helpers panic on purpose: a failed step is a failed test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::{path::PathBuf, time::Duration};

use capi_test_support::{TestCluster, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, api::PostParams};
use serde_json::{Value, json};

const NODE: &str = "process-node";
const TESTPOD: &str = env!("CARGO_BIN_EXE_capi-process-node-testpod");
const AGENT: &str = env!("CARGO_BIN_EXE_capi-process-node");
const IMAGE: &str = "example.invalid/tests/capi-process-node-testpod:test";

fn images_file() -> PathBuf {
    let path = std::env::temp_dir().join(format!("cpn-images-{}.yaml", std::process::id()));
    let text = format!(
        "images:\n- repository: capi-process-node-testpod\n  tag: test\n  binary: {TESTPOD}\n"
    );
    std::fs::write(&path, text).expect("writing the images file");
    path
}

fn cluster() -> &'static TestCluster {
    capi_test_support::process_node_cluster(
        &images_file(),
        std::path::Path::new(AGENT),
        "--initial-backoff 2 --max-backoff 16 --max-grace 10",
    )
    .expect("a local control plane with a process node")
}

fn state_dir(c: &TestCluster) -> PathBuf {
    c.dir().join("process-node")
}

/// A pod for the process node: tolerates its taint and selects it.
fn pod(name: &str, container: Value, extra_spec: Value) -> Pod {
    let mut spec = json!({
        "nodeSelector": {"capi-provider-operator.dev/process-node": "true"},
        "tolerations": [{"key": "capi-provider-operator.dev/process-node", "operator": "Exists"}],
        "terminationGracePeriodSeconds": 5,
        "containers": [container],
    });
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": spec,
    }))
    .expect("a pod")
}

fn apply(c: &TestCluster, ns: &str, manifest: Value) {
    let file = std::env::temp_dir().join(format!("cpn-{}-{}.json", std::process::id(), rand()));
    std::fs::write(&file, manifest.to_string()).expect("writing manifest");
    c.kubectl_ok(&["apply", "-n", ns, "-f", &file.to_string_lossy()])
        .expect("kubectl apply");
}

fn rand() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

async fn get(client: &Client, ns: &str, name: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

fn status(p: &Pod) -> Value {
    serde_json::to_value(&p.status).unwrap_or_default()
}

fn condition(p: &Pod, kind: &str) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| c.status.clone())
}

async fn wait_pod(
    client: &Client,
    ns: &str,
    name: &str,
    secs: u64,
    what: &str,
    f: impl Fn(&Pod) -> bool,
) -> Pod {
    let found = wait_for(Duration::from_secs(secs), || async {
        get(client, ns, name).await.filter(|p| f(p))
    })
    .await;
    match found {
        Some(p) => p,
        None => {
            let now = get(client, ns, name).await.map(|p| status(&p));
            panic!("pod {ns}/{name}: {what} not reached; status now: {now:#?}")
        }
    }
}

/// GET `path` from the pod's port 8080 through the API server's pod proxy.
fn proxy(c: &TestCluster, ns: &str, pod: &str, path: &str) -> Option<String> {
    let url = format!("/api/v1/namespaces/{ns}/pods/{pod}:8080/proxy{path}");
    c.kubectl(&["get", "--raw", &url])
        .ok()
        .filter(|r| r.0)
        .map(|r| r.1)
}

fn serving(name: &str, extra: Value) -> Value {
    let mut c = json!({
        "name": "main",
        "image": IMAGE,
        "args": ["--serve", "8080"],
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 1, "failureThreshold": 1},
    });
    if let (Some(o), Some(e)) = (c.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    let _ = name;
    c
}

async fn setup(prefix: &str) -> (&'static TestCluster, Client, String) {
    let c = cluster();
    let client = c.client().await.expect("client");
    let ns = c.namespace(&client, prefix).await.expect("namespace").name;
    (c, client, ns)
}

async fn create(client: &Client, ns: &str, p: &Pod) {
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), p)
        .await
        .expect("creating the pod");
}

fn pid_of(p: &Pod) -> Option<i32> {
    let s = status(p);
    s["containerStatuses"][0]["containerID"]
        .as_str()?
        .strip_prefix("process://")?
        .parse()
        .ok()
}

#[tokio::test]
async fn env_volumes_credentials_service_and_deletion() {
    let (c, client, ns) = setup("cpn-env").await;
    apply(
        c,
        &ns,
        json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"}, "stringData": {"key": "secret-v1"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"}, "data": {"greeting": "hello"}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "limited"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "pods"},
             "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "pods"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
             "subjects": [{"kind": "ServiceAccount", "name": "limited", "namespace": ns}]},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
             "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}},
        ]}),
    );
    let container = serving(
        "web",
        json!({
            "env": [
                {"name": "A", "value": "a"},
                {"name": "B", "value": "$(A)-b"},
                {"name": "ESCAPED", "value": "$$(A)"},
                {"name": "UNKNOWN", "value": "$(NOPE)"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "key"}}},
                {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cm1", "key": "greeting"}}},
                {"name": "OPTIONAL", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": true}}},
            ],
            "envFrom": [{"configMapRef": {"name": "cm1"}, "prefix": "FROM_"}],
            "args": ["--serve", "8080", "$(B)"],
            "volumeMounts": [
                {"name": "secret", "mountPath": "/etc/cpn-test/secret", "readOnly": true},
                {"name": "cm", "mountPath": "/etc/cpn-test/cm"},
                {"name": "scratch", "mountPath": "/etc/cpn-test/scratch"},
                {"name": "proj", "mountPath": "/etc/cpn-test/proj"},
            ],
        }),
    );
    let p = pod(
        "web",
        container,
        json!({
            "serviceAccountName": "limited",
            "initContainers": [{"name": "init", "image": IMAGE, "args": ["--print-env", "--exit", "0"]}],
            "volumes": [
                {"name": "secret", "secret": {"secretName": "s1"}},
                {"name": "cm", "configMap": {"name": "cm1", "items": [{"key": "greeting", "path": "hi.txt"}]}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "proj", "projected": {"sources": [
                    {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                    {"configMap": {"name": "cm1"}},
                ]}},
            ],
        }),
    );
    create(&client, &ns, &p).await;
    let running = wait_pod(&client, &ns, "web", 60, "Ready", |p| {
        condition(p, "Ready").as_deref() == Some("True")
    })
    .await;
    let st = status(&running);
    assert_eq!(st["phase"], "Running");
    let pod_ip = st["podIP"].as_str().expect("podIP").to_string();
    assert!(pod_ip.starts_with("10.213."), "{pod_ip}");
    assert!(
        st["containerStatuses"][0]["containerID"]
            .as_str()
            .is_some_and(|s| s.starts_with("process://"))
    );
    // The pod has its own hostname, its name, as under a kubelet.
    let pid = pid_of(&running).expect("pid");
    let host = std::process::Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-u", "hostname"])
        .output()
        .expect("nsenter");
    assert_eq!(String::from_utf8_lossy(&host.stdout).trim(), "web");

    let env = proxy(c, &ns, "web", "/env").expect("env through the pod proxy");
    for want in [
        "A=a",
        "B=a-b",
        "ESCAPED=$(A)",
        "UNKNOWN=$(NOPE)",
        "POD_NAME=web",
        "APP=web",
        "SECRET=secret-v1",
        "CM=hello",
        "FROM_greeting=hello",
        "KUBERNETES_SERVICE_HOST=127.0.0.1",
    ] {
        assert!(env.lines().any(|l| l == want), "{want} missing from {env}");
    }
    assert!(
        env.lines().any(|l| l == format!("POD_IP={pod_ip}")),
        "{env}"
    );
    assert!(!env.contains("OPTIONAL="), "{env}");
    assert_eq!(
        st["initContainerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    assert_eq!(condition(&running, "Initialized").as_deref(), Some("True"));
    let init_log = state_dir(c).join("logs").join(format!("{ns}_web_init.log"));
    let init_text = std::fs::read_to_string(&init_log).expect("the init container log");
    assert!(init_text.contains("ENV HOSTNAME=web"), "{init_text}");
    let log = state_dir(c).join("logs").join(format!("{ns}_web_main.log"));
    let text = std::fs::read_to_string(&log).expect("the container log");
    assert!(
        text.contains("SERVING 8080") && text.contains("ARG a-b"),
        "{text}"
    );

    let file = |path: &str| {
        proxy(
            c,
            &ns,
            "web",
            &format!("/file?path={}", path.replace('/', "%2F")),
        )
    };
    assert_eq!(
        file("/etc/cpn-test/secret/key").as_deref(),
        Some("secret-v1")
    );
    assert_eq!(file("/etc/cpn-test/cm/hi.txt").as_deref(), Some("hello"));
    assert!(file("/etc/cpn-test/proj/labels").is_some_and(|l| l.contains("app=\"web\"")));
    assert_eq!(
        file("/etc/cpn-test/proj/greeting").as_deref(),
        Some("hello")
    );
    let uid = running.metadata.uid.clone().expect("uid");
    let scratch = state_dir(c)
        .join("pods")
        .join(uid)
        .join("volumes/scratch/note");
    std::fs::write(&scratch, "scratch").expect("writing into the emptyDir");
    assert_eq!(
        file("/etc/cpn-test/scratch/note").as_deref(),
        Some("scratch")
    );
    assert!(
        !std::path::Path::new("/etc/cpn-test/secret/key").exists(),
        "the volume leaked into the host's mount namespace"
    );

    c.kubectl_ok(&[
        "patch",
        "secret",
        "s1",
        "-n",
        &ns,
        "-p",
        r#"{"stringData":{"key":"secret-v2"}}"#,
    ])
    .expect("patch");
    let updated = wait_for(Duration::from_secs(30), || async {
        file("/etc/cpn-test/secret/key").filter(|v| v == "secret-v2")
    })
    .await;
    assert!(
        updated.is_some(),
        "the Secret update never reached the mounted file"
    );

    let api = |path: String| {
        proxy(
            c,
            &ns,
            "web",
            &format!("/api?path={}", path.replace('/', "%2F")),
        )
    };
    let allowed = api(format!("/api/v1/namespaces/{ns}/pods")).expect("api call");
    assert!(allowed.starts_with("200\n"), "listing pods: {allowed}");
    let refused = api(format!("/api/v1/namespaces/{ns}/secrets")).expect("api call");
    assert!(refused.starts_with("403\n"), "listing secrets: {refused}");

    let via_service = c.kubectl_ok(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{ns}/services/http:web:80/proxy/readyz"),
    ]);
    assert_eq!(via_service.expect("service proxy").trim(), "ok");
    let endpoint_ready = |want: bool| {
        let ns = ns.clone();
        let pod_ip = pod_ip.clone();
        async move {
            let out = c
                .kubectl_ok(&[
                    "get",
                    "endpointslices",
                    "-n",
                    &ns,
                    "-l",
                    "kubernetes.io/service-name=web",
                    "-o",
                    "json",
                ])
                .ok()?;
            let v: Value = serde_json::from_str(&out).ok()?;
            let eps = v["items"][0]["endpoints"].as_array()?.clone();
            eps.iter()
                .any(|e| e["addresses"][0] == pod_ip.as_str() && e["conditions"]["ready"] == want)
                .then_some(())
        }
    };
    assert!(
        wait_for(Duration::from_secs(30), || endpoint_ready(true))
            .await
            .is_some(),
        "no ready endpoint"
    );
    proxy(c, &ns, "web", "/set?ready=0").expect("toggling readiness");
    wait_pod(&client, &ns, "web", 30, "not Ready", |p| {
        condition(p, "Ready").as_deref() == Some("False")
    })
    .await;
    assert!(
        wait_for(Duration::from_secs(30), || endpoint_ready(false))
            .await
            .is_some(),
        "endpoint still ready"
    );

    let pid = pid_of(&running).expect("pid");
    c.kubectl_ok(&["delete", "pod", "web", "-n", &ns, "--wait=false"])
        .expect("delete");
    let gone = wait_for(Duration::from_secs(30), || async {
        get(&client, &ns, "web").await.is_none().then_some(())
    })
    .await;
    assert!(gone.is_some(), "the pod was not removed");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "process {pid} survived its pod"
    );
}

#[tokio::test]
async fn liveness_failure_restarts_the_container() {
    let (c, client, ns) = setup("cpn-live").await;
    let container = serving(
        "live",
        json!({
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1, "failureThreshold": 2},
            "startupProbe": {"exec": {"command": ["/bin/sh", "-c", "test -d /etc/cpn-test-exec"]}, "periodSeconds": 1},
            "volumeMounts": [{"name": "scratch", "mountPath": "/etc/cpn-test-exec"}],
        }),
    );
    let volumes = json!({"volumes": [{"name": "scratch", "emptyDir": {}}]});
    create(&client, &ns, &pod("live", container, volumes)).await;
    let first = wait_pod(&client, &ns, "live", 60, "Ready", |p| {
        condition(p, "Ready").as_deref() == Some("True")
    })
    .await;
    let pid = pid_of(&first).expect("pid");
    proxy(c, &ns, "live", "/set?healthy=0").expect("toggling health");
    let restarted = wait_pod(&client, &ns, "live", 60, "restarted", |p| {
        status(p)["containerStatuses"][0]["restartCount"].as_i64() >= Some(1)
            && pid_of(p).is_some_and(|n| n != pid)
    })
    .await;
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    // The new process is healthy again (its state starts fresh).
    wait_pod(&client, &ns, "live", 60, "Ready again", |p| {
        condition(p, "Ready").as_deref() == Some("True")
    })
    .await;
    let _ = restarted;
    let events = c
        .kubectl_ok(&["get", "events", "-n", &ns, "-o", "json"])
        .expect("events");
    assert!(
        events.contains("Unhealthy") && events.contains("failed liveness probe"),
        "{events}"
    );
}

#[tokio::test]
async fn crash_loop_back_off_with_the_log_tail() {
    let (_c, client, ns) = setup("cpn-crash").await;
    let container = json!({
        "name": "main", "image": IMAGE,
        "args": ["--cat", "/nonexistent/file", "--exit", "3"],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    });
    create(&client, &ns, &pod("crash", container, json!({}))).await;
    let mut seen: Vec<u64> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while seen.len() < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Some(p) = get(&client, &ns, "crash").await else {
            continue;
        };
        let s = status(&p)["containerStatuses"][0].clone();
        if s["state"]["waiting"]["reason"] != "CrashLoopBackOff" {
            continue;
        }
        let msg = s["state"]["waiting"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let secs: u64 = msg
            .strip_prefix("back-off ")
            .and_then(|m| m.split('s').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{msg}"));
        assert!(
            msg.contains("restarting failed container=main pod=crash_"),
            "{msg}"
        );
        let term = &s["lastState"]["terminated"];
        assert_eq!(term["exitCode"], 3);
        assert_eq!(term["reason"], "Error");
        let tail = term["message"].as_str().unwrap_or_default();
        assert!(
            tail.contains("exiting with 3") && tail.contains("FILE /nonexistent/file"),
            "{tail}"
        );
        if seen.last() != Some(&secs) {
            seen.push(secs);
        }
    }
    let found = (seen.len() >= 2).then_some(());
    assert!(found.is_some(), "back-off never grew: {seen:?}");
    assert!(seen.windows(2).all(|w| w[1] > w[0]), "{seen:?}");
}

#[tokio::test]
async fn unknown_image_is_err_image_pull() {
    let (_c, client, ns) = setup("cpn-image").await;
    let container =
        json!({"name": "main", "image": "registry.example/x/capi-process-node-testpod:v9"});
    create(&client, &ns, &pod("img", container, json!({}))).await;
    let p = wait_pod(&client, &ns, "img", 30, "ErrImagePull", |p| {
        status(p)["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImagePull"
    })
    .await;
    let msg = status(&p)["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.contains("registry.example/x/capi-process-node-testpod:v9") && msg.contains("test"),
        "{msg}"
    );
    wait_pod(&client, &ns, "img", 30, "ImagePullBackOff", |p| {
        status(p)["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    })
    .await;
}

#[tokio::test]
async fn missing_secret_waits_with_failed_mount_then_starts() {
    let (c, client, ns) = setup("cpn-mount").await;
    let container = serving(
        "late",
        json!({"volumeMounts": [{"name": "certs", "mountPath": "/etc/cpn-test/certs"}]}),
    );
    let p = pod(
        "late",
        container,
        json!({"volumes": [{"name": "certs", "secret": {"secretName": "late-certs"}}]}),
    );
    create(&client, &ns, &p).await;
    let waiting = wait_pod(&client, &ns, "late", 30, "ContainerCreating", |p| {
        let s = status(p)["containerStatuses"][0]["state"]["waiting"].clone();
        s["reason"] == "ContainerCreating"
            && s["message"]
                .as_str()
                .is_some_and(|m| m.contains("late-certs"))
    })
    .await;
    assert_eq!(status(&waiting)["phase"], "Pending");
    let events = c
        .kubectl_ok(&["get", "events", "-n", &ns, "-o", "json"])
        .expect("events");
    assert!(events.contains("FailedMount"), "{events}");
    apply(
        c,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "late-certs"}, "stringData": {"tls.crt": "CERT"}}),
    );
    wait_pod(&client, &ns, "late", 60, "Ready", |p| {
        condition(p, "Ready").as_deref() == Some("True")
    })
    .await;
    let crt = proxy(
        c,
        &ns,
        "late",
        "/file?path=%2Fetc%2Fcpn-test%2Fcerts%2Ftls.crt",
    );
    assert_eq!(crt.as_deref(), Some("CERT"));
}

#[tokio::test]
async fn a_pod_without_the_toleration_never_lands_on_the_node() {
    let (_c, client, ns) = setup("cpn-taint").await;
    let mut p = pod(
        "untolerated",
        json!({"name": "main", "image": IMAGE}),
        json!({}),
    );
    if let Some(s) = p.spec.as_mut() {
        s.tolerations = None;
    }
    create(&client, &ns, &p).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let p = get(&client, &ns, "untolerated").await.expect("pod");
    assert_eq!(p.spec.as_ref().and_then(|s| s.node_name.clone()), None);
    assert_eq!(condition(&p, "PodScheduled").as_deref(), Some("False"));
    let node = _c
        .kubectl_ok(&["get", "node", NODE, "-o", "json"])
        .expect("the process node");
    let node: Value = serde_json::from_str(&node).expect("json");
    assert_eq!(
        node["metadata"]["labels"]["capi-provider-operator.dev/process-node"],
        "true"
    );
    let taints = node["spec"]["taints"].to_string();
    assert!(
        taints.contains("capi-provider-operator.dev/process-node") && !taints.contains("not-ready"),
        "{taints}"
    );
    let ready = node["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    assert!(ready, "{node}");
}

#[tokio::test]
async fn agent_shutdown_stops_pods_and_removes_the_network() {
    let c = cluster();
    let client = c.client().await.expect("client");
    let ns = c
        .namespace(&client, "cpn-stop")
        .await
        .expect("namespace")
        .name;
    let state = std::env::temp_dir().join(format!("cpn-stop-{}", std::process::id()));
    let bridge = format!("cpt{}", std::process::id() % 100000);
    let node = format!("process-node-stop-{}", std::process::id());
    let mut agent = std::process::Command::new(AGENT)
        .args([
            "--kubeconfig",
            &c.kubeconfig().to_string_lossy(),
            "--node-name",
            &node,
        ])
        .args([
            "--state-dir",
            &state.to_string_lossy(),
            "--images",
            &images_file().to_string_lossy(),
        ])
        .args(["--pod-cidr", "10.213.251.0/24", "--bridge", &bridge])
        .stderr(std::fs::File::create(state.with_extension("log")).expect("log"))
        .spawn()
        .expect("starting the agent");
    let mut p = pod("stopme", serving("stopme", json!({})), json!({}));
    if let Some(s) = p.spec.as_mut() {
        s.node_name = Some(node.clone());
    }
    create(&client, &ns, &p).await;
    let running = wait_pod(&client, &ns, "stopme", 60, "Ready", |p| {
        condition(p, "Ready").as_deref() == Some("True")
    })
    .await;
    let pid = pid_of(&running).expect("pid");
    let netns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip");
    assert!(String::from_utf8_lossy(&netns.stdout).contains(&format!("cpn-{bridge}-")));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("kill");
    let code = agent.wait().expect("wait");
    assert!(code.success(), "agent exit: {code}");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the pod's process survived"
    );
    let netns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip");
    assert!(!String::from_utf8_lossy(&netns.stdout).contains(&format!("cpn-{bridge}-")));
    let link = std::process::Command::new("ip")
        .args(["link", "show", "dev", &bridge])
        .output()
        .expect("ip");
    assert!(!link.status.success(), "bridge {bridge} left behind");
    let _ = c.kubectl(&["delete", "node", &node]);
}
