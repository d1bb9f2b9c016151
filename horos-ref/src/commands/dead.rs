//! `horos-ref dead`: a queue's dead letters, or one of them requeued.

use serde_json::json;
use squeueha::AsyncQueue;

use super::row;
use crate::cli::DeadArgs;
use crate::error::AppError;

pub async fn dead(queue: &AsyncQueue, args: DeadArgs, json_out: bool) -> Result<(), AppError> {
    if let Some(id) = args.requeue {
        let new_id = queue.requeue_dead(id).await?;
        if json_out {
            println!("{}", json!({"requeued": id, "id": new_id}));
        } else {
            println!("dead job {id} requeued as job {new_id}");
        }
        return Ok(());
    }
    let dead = queue.dead_letters(&args.queue, args.limit).await?;
    if json_out {
        let list: Vec<_> = dead
            .iter()
            .map(|d| {
                json!({"id": d.id, "queue": d.queue, "attempts": d.attempts,
                       "died_at": d.died_at, "reason": d.last_error})
            })
            .collect();
        println!("{}", serde_json::Value::Array(list));
    } else {
        for d in dead {
            row!(
                "{} attempts={} {}",
                d.id,
                d.attempts,
                d.last_error.unwrap_or_default()
            );
        }
    }
    Ok(())
}
