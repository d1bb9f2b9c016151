//! An operator's conveniences end to end through the binary: `run` reloads its keys on SIGHUP
//! after the file is edited (the new key passes, the removed one is refused), refuses a broken
//! file and a key whose variable is unset with the old key still working, `horos-ref reload`
//! says what changed and what needs a restart, and `horos-ref logs` lists the logs, shows a
//! lane server's output and follows `run`'s own.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BIN, Running, cli, curl, fake_server_command, free_port, json, wait_for};
use serde_json::json;
use sha2::{Digest, Sha256};

const TEST: &str = "run_reloads_keys_on_sighup_and_shows_its_servers_logs";
const ADMIN: &str = "operator-admin";
const WAIT: Duration = Duration::from_secs(60);

fn sha(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn config(port: u16, lane_port: u16, keys: &str, max_in_flight: usize) -> String {
    let command = fake_server_command(TEST, &["--port", &lane_port.to_string()]);
    format!(
        "database = \"jobs.db\"\n[feeder]\ncooldown_s = 0\nidle_poll_ms = 20\n\n\
         [coordinator]\nbind = \"127.0.0.1:{port}\"\napi_key = \"{ADMIN}\"\n\
         max_in_flight = {max_in_flight}\n{keys}\n\
         [[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:{lane_port}\"\n\
         model = \"fake-model\"\nstart_wait_s = 60\ncommand = {command}\n"
    )
}

fn key(name: &str, secret: &str) -> String {
    format!(
        "[coordinator.keys.{name}]\nkey_sha256 = \"{}\"\n",
        sha(secret)
    )
}

/// The status of a chat through the coordinator with `key`.
fn chat(base: &str, key: &str) -> u16 {
    let body = json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]});
    curl(
        "POST",
        &format!("{base}/v1/chat/completions"),
        Some(&body),
        Some(key),
    )
    .0
}

fn hangup(run: &Running) {
    unsafe { libc::kill(run.0.id() as i32, libc::SIGHUP) };
}

fn count(log: &Path, text: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches(text)
        .count()
}

#[test]
fn run_reloads_keys_on_sighup_and_shows_its_servers_logs() {
    horos_fakeai::run_child_if_requested();
    let (port, lane_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("horos.toml");
    std::fs::write(
        &path,
        config(port, lane_port, &key("alpha", "sk-alpha-key"), 64),
    )
    .unwrap();
    let log = dir.path().join("stderr.log");
    let run = Running(
        Command::new(BIN)
            .arg("--config")
            .arg(&path)
            .arg("run")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_for("the lane's model through the coordinator", WAIT, || {
        chat(&base, "sk-alpha-key") == 200
    });

    // The keys edited, one more setting changed: SIGHUP applies the keys.
    std::fs::write(
        &path,
        config(port, lane_port, &key("beta", "sk-beta-key"), 32),
    )
    .unwrap();
    hangup(&run);
    wait_for("the new key accepted", WAIT, || {
        chat(&base, "sk-beta-key") == 200
    });
    assert_eq!(chat(&base, "sk-alpha-key"), 401);
    wait_for("the reload logged", WAIT, || {
        count(&log, "settings reloaded") == 1
    });
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.contains(&sha("sk-beta-key")) && !logged.contains("sk-beta-key"));

    // `reload` from the command line: nothing new for the keys, the rest needs a restart.
    let r = json(&cli(&path, &["--json", "reload"]));
    assert_eq!(r["keys_added"], json!([]), "{r}");
    assert_eq!(
        r["restart_needed"],
        json!(["coordinator.max_in_flight"]),
        "{r}"
    );
    let text = cli(&path, &["reload"]);
    assert!(text.status.success());
    assert!(
        String::from_utf8_lossy(&text.stdout)
            .contains("changed, but need a restart: coordinator.max_in_flight"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );

    // `logs -f run` follows run's own log while the next reloads are refused.
    let mut follow = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .args(["logs", "run", "-f", "-n", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let followed = BufReader::new(follow.stdout.take().unwrap());
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in followed.lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    std::thread::sleep(Duration::from_millis(1500));

    // A file that does not parse: refused, beta still passes.
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{good}\n[coordinator\nbroken")).unwrap();
    hangup(&run);
    wait_for("the broken file refused", WAIT, || {
        count(&log, "reload refused") == 1
    });
    assert_eq!(chat(&base, "sk-beta-key"), 200);
    // A key whose variable is unset: refused whole (beta is in the same file), beta passes.
    let unset = format!(
        "{}[coordinator.keys.gamma]\nkey_env = \"HOROS_E2E_UNSET_VARIABLE\"\n",
        key("beta", "sk-beta-key")
    );
    std::fs::write(&path, config(port, lane_port, &unset, 32)).unwrap();
    hangup(&run);
    wait_for("the unset variable refused", WAIT, || {
        count(&log, "reload refused") == 2
    });
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("keys.gamma.key_env"),
        "the refusal names the key"
    );
    assert_eq!(chat(&base, "sk-beta-key"), 200);
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while seen
        .iter()
        .filter(|l: &&String| l.contains("reload refused"))
        .count()
        < 2
    {
        assert!(std::time::Instant::now() < deadline, "followed: {seen:?}");
        if let Ok(line) = lines_rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(line);
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();

    // The logs: run's and the lane server's; the server's output through the admin API.
    std::fs::write(
        &path,
        config(port, lane_port, &key("beta", "sk-beta-key"), 32),
    )
    .unwrap();
    let list = json(&cli(&path, &["--json", "logs"]));
    let lane = list
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["kind"] == "lane")
        .unwrap_or_else(|| panic!("no lane log in {list}"));
    let name = lane["name"].as_str().unwrap();
    assert!(list.as_array().unwrap().iter().any(|l| l["name"] == "run"));
    let out = cli(&path, &["logs", name, "-n", "200"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // The line the supervisor writes at each start, then the server's own output (this test
    // binary re-executed as the fake server prints libtest's header).
    assert!(
        text.contains(&format!("=== horos-servers: starting {name}"))
            && text.contains("running 1 test"),
        "{text}"
    );
    let out = cli(&path, &["logs", "../jobs.db"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no log named"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The status page shows the lane server's last lines.
    let (code, page) = common::curl_text(&format!("{base}/status"));
    assert_eq!(code, 200);
    assert!(page.contains(&format!("<h3>{name}</h3>")), "{page}");
    drop(run);
}
