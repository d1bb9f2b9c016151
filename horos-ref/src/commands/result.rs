//! `horos-ref result ID`: a lane job's state and, once the feeder stored it, its answer
//! (horos-ops' `LaneJobs::status`).

use horos_ops::lanes::{LaneJobs, StatusArgs};
use squeueha::JobState;

use crate::error::AppError;

pub async fn result(jobs: &LaneJobs, id: i64, json_out: bool) -> Result<(), AppError> {
    let status = jobs.status(StatusArgs { id }).await?;
    if json_out {
        super::print_json(&status);
        return Ok(());
    }
    let state = status.state.as_str();
    let queue = status
        .queue
        .as_deref()
        .map_or(String::new(), |q| format!(" on {q}"));
    let attempts = status
        .attempts
        .map_or(String::new(), |n| format!(" (attempts {n})"));
    println!("job {id} {state}{queue}{attempts}");
    match (&status.answer, &status.last_error) {
        (Some(answer), _) => println!("{answer}"),
        (None, Some(why)) if status.state != JobState::Done => println!("last error: {why}"),
        _ => {}
    }
    Ok(())
}
