//! Many hosts: a client-chosen uuid on `POST /api/sessions`, the `X-Ptyhub-Host` header, the
//! merged list of `[cluster] peers` (a peer that does not answer listed as unreachable), and
//! Debian's nginx with the shipped `config/nginx/ptyhub-cluster.conf` in front of two daemons:
//! each session's requests reach the host its uuid hashes to.

use crate::common;

use std::collections::BTreeSet;

use common::nginx::{self, Nginx};
use common::{http, Daemon, TIMEOUT};
use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

const TOKEN: &str = "cluster-token-0123456789abcdef";

/// A daemon named `host` with these peers, all with one token.
fn host(name: &str, peers: &[String]) -> Daemon {
    let peers: Vec<String> = peers.iter().map(|p| format!("{p:?}")).collect();
    let extra = format!(
        "[cluster]\nhost = \"{name}\"\npeers = [{}]\n",
        peers.join(", ")
    );
    Daemon::start_args(&common::config(&extra), &["--token", TOKEN])
}

/// The host that answered a response.
fn answered_by(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("x-ptyhub-host")
        .unwrap_or_else(|| panic!("no X-Ptyhub-Host on {}", resp.url()))
        .to_str()
        .unwrap()
        .to_owned()
}

async fn get(url: &str) -> reqwest::Response {
    http().get(url).bearer_auth(TOKEN).send().await.unwrap()
}

async fn create(base: &str, id: Option<Uuid>, body: Value) -> reqwest::Response {
    let url = match id {
        Some(id) => format!("{base}/api/sessions?uuid={id}"),
        None => format!("{base}/api/sessions"),
    };
    http()
        .post(url)
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn chosen_uuid_in_query_or_body_and_the_host_header_on_every_response() {
    let d = host("alpha", &[]);
    let base = d.http("");
    let shell = json!({"assistant": "shell"});

    // In the query (where a balancer sees it), in the body as `id` or `uuid`.
    for (query, body) in [
        (true, shell.clone()),
        (false, json!({"assistant": "shell", "id": Uuid::new_v4()})),
        (false, json!({"assistant": "shell", "uuid": Uuid::new_v4()})),
    ] {
        let want = if query {
            Uuid::new_v4()
        } else {
            body.get("id")
                .or(body.get("uuid"))
                .unwrap()
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        };
        let resp = create(&base, query.then_some(want), body).await;
        assert_eq!(resp.status(), StatusCode::CREATED);
        assert_eq!(answered_by(&resp), "alpha");
        let info: Value = resp.json().await.unwrap();
        assert_eq!(info["id"], want.to_string());
        let again = create(&base, Some(want), shell.clone()).await;
        assert_eq!(again.status(), StatusCode::CONFLICT, "uuid taken");
        let e: Value = again.json().await.unwrap();
        assert!(
            e["error"].as_str().unwrap().contains("already exists"),
            "{e}"
        );
    }

    // Bad uuids: 400 with a message, nothing created.
    let before = get(&d.http("/api/sessions"))
        .await
        .json::<Vec<Value>>()
        .await
        .unwrap()
        .len();
    let bad = http()
        .post(d.http("/api/sessions?uuid=not-a-uuid"))
        .bearer_auth(TOKEN)
        .json(&shell)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert!(bad.text().await.unwrap().contains("is not a UUID"));
    let bad = create(&base, None, json!({"assistant": "shell", "uuid": "nope"})).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let differ = create(
        &base,
        Some(Uuid::new_v4()),
        json!({"assistant": "shell", "id": Uuid::new_v4()}),
    )
    .await;
    assert_eq!(differ.status(), StatusCode::CONFLICT);
    assert!(differ.text().await.unwrap().contains("differ"));
    let after = get(&d.http("/api/sessions"))
        .await
        .json::<Vec<Value>>()
        .await
        .unwrap()
        .len();
    assert_eq!(before, after);

    // Every kind of response names the host: public, page, asset, refusals, errors.
    let anonymous = http();
    for (path, token) in [
        ("/healthz", false),
        ("/api/version", false),
        ("/", false),
        ("/", true),
        ("/app.css", false),
        ("/api/sessions", false),
        ("/api/nope", true),
        ("/api/sessions/00000000-0000-4000-8000-000000000000", true),
    ] {
        let mut req = anonymous.get(d.http(path));
        if token {
            req = req.bearer_auth(TOKEN);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(answered_by(&resp), "alpha", "{path} ({})", resp.status());
    }
    let id = Uuid::new_v4();
    let (_ws, resp) =
        tokio_tungstenite::connect_async(d.ws(id, &format!("?token={TOKEN}&assistant=shell")))
            .await
            .unwrap();
    assert_eq!(
        resp.headers()["x-ptyhub-host"],
        "alpha",
        "WebSocket upgrade"
    );
}

/// The 429s carry `X-Ptyhub-Host` too: a WebSocket of either dialect over the per-address
/// pool, and the connection refused before any request (written by hand, not by hyper).
#[tokio::test]
async fn refusals_name_the_host_too() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let d = Daemon::start_args(
        &common::config("[cluster]\nhost = \"refuser\"\n[limits]\nmax_connections_per_ip = 1\n"),
        &["--token", TOKEN],
    );
    let id = Uuid::new_v4();
    let create = create(&d.http(""), Some(id), json!({"assistant": "shell"})).await;
    assert_eq!(create.status(), StatusCode::CREATED);
    // One WebSocket fills the authenticated pool; the next of either dialect is refused.
    // (The create request's connection gives its place back once the daemon sees it close.)
    let started = std::time::Instant::now();
    let _held = loop {
        match tokio_tungstenite::connect_async(d.ws_raw(id, &format!("?token={TOKEN}"))).await {
            Ok((ws, _)) => break ws,
            Err(e) => assert!(started.elapsed() < TIMEOUT, "the first WebSocket: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    for url in [
        d.ws_raw(id, &format!("?token={TOKEN}")),
        d.ws(id, &format!("?token={TOKEN}")),
    ] {
        match tokio_tungstenite::connect_async(&url).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 429, "{url}");
                assert_eq!(resp.headers()["x-ptyhub-host"], "refuser", "{url}");
            }
            other => panic!("{url}: expected 429, got {:?}", other.map(|_| ())),
        }
    }
    // An upload under way holds the one unauthenticated place (it cannot be evicted, having
    // sent its request): the next connection is refused before its request.
    // (A try made while the refused WebSockets' connections are still counted is refused in
    // turn: tried again until one is read.)
    let head = format!(
        "PATCH /api/sessions/{id} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{"
    );
    let upload = loop {
        let mut upload = tokio::net::TcpStream::connect(d.addr).await.unwrap();
        upload.write_all(head.as_bytes()).await.unwrap();
        let mut buf = [0; 64];
        let read = tokio::select! {
            _ = upload.read(&mut buf) => false,
            () = common::eventually("the upload's request was read", || {
                d.log_text().lines().any(|l| l.contains("method=PATCH"))
            }) => true,
        };
        if read {
            break upload;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let answer = common::refused_connection(d.addr).await;
    assert!(
        answer.contains("\r\nx-ptyhub-host: refuser\r\n"),
        "{answer}"
    );
    drop(upload);
}

/// A local TCP port that accepts connections and never answers: a hung peer.
fn black_hole() -> (std::net::TcpListener, String) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    (l, url)
}

// ---- nginx ------------------------------------------------------------------------------------

/// Debian's nginx binary, if installed (tests/run installs it).
/// A WebSocket through `url`: the host that answered the upgrade and the first `status`.
async fn ws_join(url: &str) -> (String, Value) {
    let (mut ws, resp) = tokio_tungstenite::connect_async(url)
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let host = resp.headers()["x-ptyhub-host"].to_str().unwrap().to_owned();
    let status = tokio::time::timeout(TIMEOUT, async {
        while let Some(msg) = ws.next().await {
            if let Message::Text(t) = msg.unwrap() {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["type"] == "status" {
                    return v;
                }
            }
        }
        panic!("{url}: closed before a status");
    })
    .await
    .expect("a status message");
    (host, status)
}

#[tokio::test]
async fn nginx_routes_each_session_to_its_host_and_the_list_merges_the_peers() {
    let Some(nginx) = nginx::binary() else {
        println!(
            "SKIPPED: nginx is not installed (tests/run installs Debian's nginx package); \
             the cluster routing through nginx was not tested"
        );
        return;
    };
    let beta = host("beta", &[]);
    let (_hung, hung_url) = black_hole();
    let mut beta = Some(beta);
    let beta_url = beta.as_ref().unwrap().http("");
    let alpha = host("alpha", &[beta_url.clone(), hung_url.clone()]);
    let beta_addr = beta.as_ref().unwrap().addr;
    let upstreams = [alpha.addr, beta_addr];
    let lb = Nginx::start(&nginx, |port| nginx::cluster_site(&upstreams, port))
        .expect("nginx with config/nginx/ptyhub-cluster.conf");
    let direct = |name: &str| {
        if name == "alpha" {
            alpha.http("")
        } else {
            beta_url.clone()
        }
    };

    // Sessions created through nginx with chosen uuids: each lands where its uuid is routed
    // (asked before it exists), and only there.
    let mut owner = Vec::new();
    for _ in 0..16 {
        let id = Uuid::new_v4();
        let before = get(&lb.url("http", &format!("/api/sessions/{id}"))).await;
        assert_eq!(before.status(), StatusCode::NOT_FOUND);
        let routed = answered_by(&before);
        let resp = create(&lb.url("http", ""), Some(id), json!({"assistant": "shell"})).await;
        assert_eq!(resp.status(), StatusCode::CREATED);
        let created_on = answered_by(&resp);
        assert_eq!(
            created_on, routed,
            "session {id} created where its uuid is routed"
        );
        let other = if created_on == "alpha" {
            "beta"
        } else {
            "alpha"
        };
        assert_eq!(
            get(&format!("{}/api/sessions/{id}", direct(&created_on)))
                .await
                .status(),
            StatusCode::OK
        );
        assert_eq!(
            get(&format!("{}/api/sessions/{id}", direct(other)))
                .await
                .status(),
            StatusCode::NOT_FOUND,
            "{id} is not on {other}"
        );
        owner.push((id, created_on));
    }
    let hosts: BTreeSet<&str> = owner.iter().map(|(_, h)| h.as_str()).collect();
    assert_eq!(hosts.len(), 2, "16 uuids spread over both hosts: {owner:?}");

    // Every later request for a uuid reaches its host.
    for (id, home) in &owner {
        let resp = get(&lb.url("http", &format!("/api/sessions/{id}"))).await;
        assert_eq!(
            (resp.status(), answered_by(&resp)),
            (StatusCode::OK, home.clone())
        );
    }
    // Spelt in uppercase too: nginx lowercases a uuid before hashing it, as the daemon
    // matches it; and a session created under an uppercase uuid lands where its lowercase
    // spelling is routed.
    for (id, home) in &owner {
        let upper = id.to_string().to_uppercase();
        let resp = get(&lb.url("http", &format!("/api/sessions/{upper}"))).await;
        assert_eq!(
            (resp.status(), answered_by(&resp)),
            (StatusCode::OK, home.clone()),
            "{upper}"
        );
    }
    for _ in 0..8 {
        let id = Uuid::new_v4();
        let upper = id.to_string().to_uppercase();
        let url = format!("{}/api/sessions?uuid={upper}", lb.url("http", ""));
        let resp = http()
            .post(url)
            .bearer_auth(TOKEN)
            .json(&json!({"assistant": "shell"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED, "{upper}");
        let created_on = answered_by(&resp);
        let resp = get(&lb.url("http", &format!("/api/sessions/{id}"))).await;
        assert_eq!(
            (resp.status(), answered_by(&resp)),
            (StatusCode::OK, created_on.clone()),
            "{id}"
        );
        owner.push((id, created_on));
    }
    let one_each = ["alpha", "beta"].map(|h| owner.iter().find(|(_, o)| o == h).unwrap().clone());
    for (id, home) in &one_each {
        // The page, the replay page, REST, the SSE log, the recording, share links.
        for path in [
            format!("/session/{id}"),
            format!("/replay/{id}"),
            format!("/api/sessions/{id}/scrollback"),
            format!("/api/sessions/{id}/share"),
            format!("/api/recordings/{id}"),
            format!("/api/sessions/{id}/recording"),
        ] {
            let resp = get(&lb.url("http", &path)).await;
            assert_eq!(resp.status(), StatusCode::OK, "{path}");
            assert_eq!(&answered_by(&resp), home, "{path}");
        }
        let log = get(&lb.url("http", &format!("/api/sessions/{id}/log?tail=5"))).await;
        assert_eq!(log.status(), StatusCode::OK);
        assert_eq!(&answered_by(&log), home, "SSE log");
        assert!(log.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream"));
        let share = http()
            .post(lb.url("http", &format!("/api/sessions/{id}/share")))
            .bearer_auth(TOKEN)
            .json(&json!({"role": "viewer"}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            (share.status(), &answered_by(&share)),
            (StatusCode::CREATED, home)
        );
        let share: Value = share.json().await.unwrap();
        let renamed = http()
            .patch(lb.url("http", &format!("/api/sessions/{id}")))
            .bearer_auth(TOKEN)
            .json(&json!({"name": format!("on-{home}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            (renamed.status(), &answered_by(&renamed)),
            (StatusCode::OK, home)
        );

        // The WebSocket joins the session there (a wrong host would create a new one).
        let (ws_host, status) = ws_join(&lb.url("ws", &format!("/ws/{id}?token={TOKEN}"))).await;
        assert_eq!(&ws_host, home, "WebSocket");
        assert_eq!(status["sessionUUID"], id.to_string());
        assert_eq!(status["sessionName"], format!("on-{home}"));
        // A share link's token works through nginx: it reaches the host that made it.
        let token = share["token"].as_str().unwrap();
        let (ws_host, status) = ws_join(&lb.url("ws", &format!("/ws/{id}?token={token}"))).await;
        assert_eq!((&ws_host, &status["readOnly"]), (home, &json!(true)));
        let raw =
            tokio_tungstenite::connect_async(lb.url("ws", &format!("/ws/{id}/raw?token={TOKEN}")))
                .await
                .unwrap()
                .1;
        assert_eq!(raw.headers()["x-ptyhub-host"], home.as_str(), "raw dialect");
    }

    // A WebSocket to a new uuid creates the session on the host the uuid hashes to.
    let fresh = Uuid::new_v4();
    let routed = answered_by(&get(&lb.url("http", &format!("/api/sessions/{fresh}"))).await);
    let (ws_host, _) =
        ws_join(&lb.url("ws", &format!("/ws/{fresh}?token={TOKEN}&assistant=shell"))).await;
    assert_eq!(ws_host, routed);
    owner.push((fresh, routed));

    // Requests that name no session go to either host.
    let mut seen = BTreeSet::new();
    for _ in 0..10 {
        seen.insert(answered_by(&get(&lb.url("http", "/api/sessions")).await));
    }
    assert_eq!(seen.len(), 2, "requests without a uuid spread: {seen:?}");

    // DELETE through nginx ends it on its host.
    let (gone, gone_home) = owner.remove(0);
    let del = http()
        .delete(lb.url("http", &format!("/api/sessions/{gone}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(
        (del.status(), answered_by(&del)),
        (StatusCode::NO_CONTENT, gone_home.clone())
    );
    assert_eq!(
        get(&format!("{}/api/sessions/{gone}", direct(&gone_home)))
            .await
            .status(),
        StatusCode::NOT_FOUND
    );

    // alpha's merged list: both hosts' sessions, each marked; the hung peer unreachable.
    let merged: Value = get(&alpha.http("/api/sessions?all=1"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(merged["host"], "alpha");
    let listed: BTreeSet<(String, String)> = merged["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["host"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // alpha's earlier test sessions: none; both hosts' sessions are all the ones made here.
    let want: BTreeSet<(String, String)> = owner
        .iter()
        .map(|(id, h)| (id.to_string(), h.clone()))
        .collect();
    assert_eq!(listed, want);
    let hosts = merged["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 3, "{merged}");
    assert_eq!(
        (&hosts[0]["host"], &hosts[0]["reachable"]),
        (&json!("alpha"), &json!(true))
    );
    assert_eq!(hosts[0]["url"], Value::Null);
    assert_eq!(
        (&hosts[1]["host"], &hosts[1]["url"]),
        (&json!("beta"), &json!(beta_url))
    );
    assert_eq!(hosts[1]["reachable"], true);
    assert_eq!(
        (&hosts[2]["url"], &hosts[2]["reachable"]),
        (&json!(hung_url), &json!(false))
    );
    assert!(
        hosts[2]["error"]
            .as_str()
            .unwrap()
            .contains("no answer within"),
        "{merged}"
    );
    // The plain list stays this host's own.
    let own: Vec<Value> = get(&alpha.http("/api/sessions"))
        .await
        .json()
        .await
        .unwrap();
    assert!(own.len() < want.len() && !own.is_empty());

    // beta stopped: listed as unreachable, alpha's own sessions still there.
    drop(beta.take());
    let merged: Value = get(&alpha.http("/api/sessions?all=1"))
        .await
        .json()
        .await
        .unwrap();
    let hosts = merged["hosts"].as_array().unwrap();
    assert_eq!(
        (&hosts[1]["url"], &hosts[1]["reachable"]),
        (&json!(beta_url), &json!(false))
    );
    assert!(hosts[1]["error"].is_string(), "{merged}");
    let hosts_listed: BTreeSet<&str> = merged["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts_listed, BTreeSet::from(["alpha"]));
    let _ = lb.dir.path();
}

/// Peers over plain http beyond this machine would get the token in the clear: the start and
/// `--check-config` refuse them with a clear error unless `allow_cleartext_peers = true`, and
/// then warn about each, and about no loopback or https peer.
#[tokio::test]
async fn plain_http_peers_beyond_loopback_are_refused_unless_allowed() {
    let peers = [
        "http://10.1.2.3:1977".to_owned(),
        "http://127.0.0.1:9".to_owned(),
        "http://localhost:9".to_owned(),
        "https://10.1.2.4:1977".to_owned(),
    ];
    let quoted: Vec<String> = peers.iter().map(|p| format!("{p:?}")).collect();
    let dir = tempfile::tempdir().unwrap();
    let check = |allow: bool| {
        let cfg = dir.path().join("c.toml");
        let text = format!(
            "[cluster]\nallow_cleartext_peers = {allow}\npeers = [{}]\n",
            quoted.join(", ")
        );
        std::fs::write(&cfg, common::config(&text)).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ptyhub"))
            .args(["--check-config", "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = check(false);
    assert!(!ok, "{text}");
    assert!(
        text.contains("peer \"http://10.1.2.3:1977\" is plain http beyond this machine")
            && text.contains("allow_cleartext_peers = true"),
        "{text}"
    );
    // The daemon does not start either.
    let refused = std::panic::catch_unwind(|| host("refused", &peers));
    assert!(refused.is_err(), "the daemon started with a cleartext peer");

    let (ok, text) = check(true);
    assert!(ok, "{text}");
    let warned: Vec<&str> = text.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(
        warned,
        ["warning: cluster peer http://10.1.2.3:1977 is plain http: the token is sent to it unencrypted"],
        "{text}"
    );
    let extra = format!(
        "[cluster]\nhost = \"warned\"\nallow_cleartext_peers = true\npeers = [{}]\n",
        quoted.join(", ")
    );
    let d = Daemon::start_args(&common::config(&extra), &["--token", TOKEN]);
    // Written before the daemon listens, so it is in the log by the time it is up.
    let log = d.log_text();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cluster peer over plain http"))
        .collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(warned[0].contains("http://10.1.2.3:1977"), "{log}");
}

/// A host listed among its own peers (here through a port forwarded to it, as its own
/// network address would be) lists its sessions once, and a peer listed twice counts once.
#[tokio::test]
async fn a_host_among_its_own_peers_lists_its_sessions_once() {
    let forward = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let me = format!("http://{}", forward.local_addr().unwrap());
    let beta = host("beta", &[]);
    let beta_url = beta.http("");
    let beta_again = beta_url.replace("127.0.0.1", "localhost");
    let d = host("alpha", &[me.clone(), beta_url.clone(), beta_again.clone()]);
    let target = d.addr;
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = forward.accept().await {
            tokio::spawn(async move {
                if let Ok(mut out) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                }
            });
        }
    });
    for base in [d.http(""), beta_url] {
        let resp = create(&base, None, json!({"assistant": "shell"})).await;
        assert_eq!(resp.status(), StatusCode::CREATED);
    }
    let list: Value = get(&d.http("/api/sessions?all=1"))
        .await
        .json()
        .await
        .unwrap();
    let hosts: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["alpha", "beta"], "{list}");
    let counts: Vec<(&Value, &Value, &Value)> = list["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (&h["host"], &h["reachable"], &h["sessions"]))
        .collect();
    assert_eq!(
        counts,
        [
            (&json!("alpha"), &json!(true), &json!(1)),
            (&json!("alpha"), &json!(true), &json!(0)),
            (&json!("beta"), &json!(true), &json!(1)),
            (&json!("beta"), &json!(true), &json!(0)),
        ],
        "{list}"
    );
}
