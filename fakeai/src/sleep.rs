//! vLLM's sleep mode (`POST /sleep?level=N`, `POST /wake_up`, `GET /is_sleeping`) and
//! llama-server's idle sleep (asleep after idle time, woken by the next request, `/props`
//! saying which), scripted by [`SleepScript`].

use std::sync::Mutex;

use hyper::StatusCode;
use tokio::time::Instant;

use crate::config::{Fault, SleepScript};
use crate::http::{DropConnection, Resp, error_response, lock, respond};

/// The sleep state of a server.
pub(crate) struct Sleep {
    script: SleepScript,
    state: Mutex<SleepState>,
}

struct SleepState {
    /// The level it was put to sleep at (vLLM's sleep mode); `None`: not asked to sleep.
    asleep: Option<u8>,
    sleep_fault: Fault,
    wake_fault: Fault,
    sleeps: u64,
    wakes: u64,
    /// Inference requests in progress (none: the idle time runs).
    running: u64,
    /// When the last inference request ended (or the server started).
    last_active: Instant,
}

/// An inference request in progress: the idle timer waits until it ends.
pub(crate) struct Active<'a>(&'a Sleep);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.0.state);
        st.running = st.running.saturating_sub(1);
        st.last_active = Instant::now();
    }
}

impl Sleep {
    pub(crate) fn new(script: &SleepScript) -> Sleep {
        Sleep {
            state: Mutex::new(SleepState {
                asleep: None,
                sleep_fault: script.sleep_fault,
                wake_fault: script.wake_fault,
                sleeps: 0,
                wakes: 0,
                running: 0,
                last_active: Instant::now(),
            }),
            script: script.clone(),
        }
    }

    /// Asleep by its idle timer: nothing ran for the idle time.
    fn idle_asleep(&self, st: &SleepState) -> bool {
        self.script
            .idle_sleep
            .is_some_and(|idle| st.running == 0 && st.last_active.elapsed() >= idle)
    }

    /// Sleeps and wakes so far, and the level it sleeps at now (2 asleep by its idle timer:
    /// its weights dropped).
    pub(crate) fn counts(&self) -> (u64, u64, Option<u8>) {
        let st = lock(&self.state);
        let idle = self.idle_asleep(&st).then_some(2);
        (st.sleeps, st.wakes, st.asleep.or(idle))
    }

    /// Whether it sleeps now, either way.
    pub(crate) fn is_sleeping(&self) -> bool {
        self.counts().2.is_some()
    }

    pub(crate) fn set_sleep_fault(&self, fault: Fault) {
        lock(&self.state).sleep_fault = fault;
    }

    pub(crate) fn set_wake_fault(&self, fault: Fault) {
        lock(&self.state).wake_fault = fault;
    }

    /// An inference request comes: refused (503) while asleep on request, as vLLM refuses
    /// what needs the weights; asleep by its idle timer it wakes first (the level-2 wake
    /// latency: its weights reloaded), as llama-server does.
    pub(crate) async fn admit(&self) -> Result<Active<'_>, Resp> {
        let woken = {
            let mut st = lock(&self.state);
            if st.asleep.is_some() {
                return Err(error_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the model is sleeping: POST /wake_up first",
                ));
            }
            let woken = self.idle_asleep(&st);
            if woken {
                st.sleeps += 1;
                st.wakes += 1;
            }
            st.running += 1;
            woken
        };
        let active = Active(self);
        if woken {
            tokio::time::sleep(self.script.wake_latency_l2).await;
        }
        Ok(active)
    }

    /// vLLM's `POST /sleep?level=1|2` (level 1 by default): asleep once it has answered 200.
    pub(crate) async fn sleep(&self, query: Option<&str>) -> Result<Resp, DropConnection> {
        let level = query
            .unwrap_or_default()
            .split('&')
            .find_map(|kv| kv.strip_prefix("level="))
            .unwrap_or("1");
        let level: u8 = match level {
            "1" => 1,
            "2" => 2,
            other => {
                return Ok(error_response(
                    StatusCode::BAD_REQUEST,
                    &format!("sleep level `{other}`: expected 1 or 2"),
                ));
            }
        };
        let fault = lock(&self.state).sleep_fault;
        if let Some(answer) = call_fault(fault, "sleep").await {
            return answer;
        }
        tokio::time::sleep(self.script.sleep_latency).await;
        let mut d = lock(&self.state);
        if d.asleep.is_none() {
            d.sleeps += 1;
        }
        d.asleep = Some(d.asleep.map_or(level, |l| l.max(level)));
        Ok(respond(StatusCode::OK, "text/plain", ""))
    }

    /// vLLM's `POST /wake_up`: awake once it has answered 200 (at once when it was awake).
    pub(crate) async fn wake_up(&self) -> Result<Resp, DropConnection> {
        let (level, fault) = {
            let d = lock(&self.state);
            (d.asleep, d.wake_fault)
        };
        let Some(level) = level else {
            return Ok(respond(StatusCode::OK, "text/plain", ""));
        };
        if let Some(answer) = call_fault(fault, "wake-up").await {
            return answer;
        }
        let script = &self.script;
        let latency = if level == 1 {
            script.wake_latency_l1
        } else {
            script.wake_latency_l2
        };
        tokio::time::sleep(latency).await;
        let mut d = lock(&self.state);
        if d.asleep.take().is_some() {
            d.wakes += 1;
        }
        Ok(respond(StatusCode::OK, "text/plain", ""))
    }
}

/// A sleep or wake call's fault: `Some` answer (or dropped connection) instead of the call.
async fn call_fault(fault: Fault, what: &str) -> Option<Result<Resp, DropConnection>> {
    match fault {
        Fault::Status(code) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            Some(Ok(error_response(
                status,
                &format!("injected {what} failure"),
            )))
        }
        Fault::Hang => {
            // Never answers: the call holds its connection until the client leaves.
            std::future::pending::<()>().await;
            Some(Err(DropConnection))
        }
        Fault::Reset => Some(Err(DropConnection)),
        _ => None,
    }
}
