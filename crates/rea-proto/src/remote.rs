//! The history and the audit log as the daemon tells them: for a user
//! whose jobs a root daemon runs (users' files), who cannot read the state
//! directory. It answers `rea history` and `rea logs` for their own jobs,
//! and `rea audit` for their own tenant (see `daemon::users`); summaries
//! and start-up questions are the daemon's.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::io;
use std::ops::ControlFlow;

use rea_core::record::Record;
use rea_store::history::{HistoryReader, JobSummary, LastOccurrences, Query};

use super::{Client, Request, Response};
use crate::protocol::HistoryChunk;

pub struct RemoteHistory {
    client: RefCell<Client>,
}

impl RemoteHistory {
    pub fn new(client: Client) -> RemoteHistory {
        RemoteHistory {
            client: RefCell::new(client),
        }
    }

    /// A streamed `history` answer read to its end (see
    /// [`crate::protocol::HistoryChunk`]), each record handed to `visit`.
    fn stream(
        &self,
        query: &Query,
        visit: &mut dyn FnMut(Record) -> ControlFlow<()>,
    ) -> io::Result<()> {
        let mut client = self.client.borrow_mut();
        let mut resp = client
            .request(&Request::History {
                query: query.clone(),
            })
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut stopped = false;
        loop {
            let chunk: HistoryChunk = answer(resp)?;
            match chunk {
                HistoryChunk::Records { records } => {
                    for record in records {
                        // The rest of the answer is still read, so the
                        // connection stays usable.
                        stopped = stopped || visit(record).is_break();
                    }
                }
                HistoryChunk::End { .. } => return Ok(()),
            }
            resp = client
                .read_response()
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
    }

    fn ask<T: serde::de::DeserializeOwned>(&self, request: &Request) -> io::Result<T> {
        let resp = self
            .client
            .borrow_mut()
            .request(request)
            .map_err(|e| io::Error::other(e.to_string()))?;
        answer(resp)
    }
}

/// The data of an answer line, or its error.
fn answer<T: serde::de::DeserializeOwned>(resp: Response) -> io::Result<T> {
    if !resp.ok {
        let kind = match resp.code.as_deref() {
            Some("unknown_job") => io::ErrorKind::NotFound,
            _ => io::ErrorKind::PermissionDenied,
        };
        return Err(io::Error::new(
            kind,
            resp.error.unwrap_or_else(|| "the daemon refused".into()),
        ));
    }
    resp.data_as().map_err(io::Error::other)
}

fn unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "the daemon answers this from its own history only",
    )
}

impl HistoryReader for RemoteHistory {
    fn query(&self, query: &Query) -> io::Result<Vec<Record>> {
        rea_store::history::collect(|visit| self.stream(query, visit))
    }

    fn query_each(
        &self,
        query: &Query,
        visit: &mut dyn FnMut(Record) -> ControlFlow<()>,
    ) -> io::Result<()> {
        self.stream(query, visit)
    }

    fn find_run(&self, run_id: &str) -> io::Result<Option<Record>> {
        self.ask(&Request::FindRun {
            run: run_id.to_string(),
        })
    }

    fn latest_final_run(&self, job: &str) -> io::Result<Option<Record>> {
        self.ask(&Request::LatestFinalRun {
            job: job.to_string(),
        })
    }

    fn unfinished_runs(&self) -> io::Result<Vec<Record>> {
        Err(unsupported())
    }

    fn last_occurrences(&self, _jobs: &HashSet<String>) -> io::Result<LastOccurrences> {
        Err(unsupported())
    }

    fn job_summaries(&self) -> io::Result<HashMap<String, JobSummary>> {
        Err(unsupported())
    }
}

/// `rea audit` asked of the daemon: the asker's own tenant's entries.
pub struct RemoteAudit {
    history: RemoteHistory,
}

impl RemoteAudit {
    pub fn new(client: Client) -> RemoteAudit {
        RemoteAudit {
            history: RemoteHistory::new(client),
        }
    }
}

impl rea_store::audit::AuditReader for RemoteAudit {
    fn query(&self, query: &rea_core::audit::Query) -> io::Result<Vec<rea_core::audit::Entry>> {
        self.history.ask(&Request::Audit {
            query: query.clone(),
        })
    }
}
