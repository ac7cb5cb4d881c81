//! tonic's own balancer, `Channel::balance_channel`, fed by the same
//! resolver as `ready_balance`: the comparison `balance-client --phases dns
//! --dns-balancer tonic` prints beside it. Not a balancer to copy: tonic
//! keeps picking an endpoint whose connection fails (tonic #2839) and picks
//! at random; this feed only tells it which addresses the name has now.

use std::{collections::BTreeSet, net::SocketAddr, time::Duration};

use ready_balance::{Resolve, changes};
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint, channel::Change};

use crate::Error;

/// The feed's task; dropping it stops the resolving.
#[derive(Debug)]
pub struct TonicBalance(JoinHandle<()>);

impl Drop for TonicBalance {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves once, then every `interval`, and tells tonic's balancer what
/// changed (at most `max` addresses). A failed resolve keeps the set.
pub async fn start<R, F>(
    resolver: R,
    endpoint_for: F,
    interval: Duration,
    max: usize,
) -> Result<(Channel, TonicBalance), Error>
where
    R: Resolve,
    F: Fn(SocketAddr) -> Result<Endpoint, Error> + Send + 'static,
{
    let first = resolver.resolve().await?;
    let (channel, sender) = Channel::balance_channel(max * 2);
    let mut held = BTreeSet::new();
    let feed = move |answer: &[SocketAddr], held: &mut BTreeSet<SocketAddr>| {
        let next = changes::next_set(held, answer, max);
        let (inserted, removed) = changes::diff(held, &next);
        let mut out = Vec::new();
        for addr in removed {
            out.push(Change::Remove(addr));
        }
        for addr in inserted {
            out.push(Change::Insert(addr, endpoint_for(addr)?));
        }
        *held = next;
        Ok::<_, Error>(out)
    };
    for change in feed(&first, &mut held)? {
        sender
            .send(change)
            .await
            .map_err(|_| "tonic's balancer is gone")?;
    }
    let task = tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            let Ok(answer) = resolver.resolve().await else {
                continue;
            };
            let Ok(out) = feed(&answer, &mut held) else {
                continue;
            };
            for change in out {
                if sender.send(change).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok((channel, TonicBalance(task)))
}
