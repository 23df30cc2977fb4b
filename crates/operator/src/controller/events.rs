//! Publishing events on provider objects so that each distinct message is seen.
//!
//! kube's [`Recorder`] folds an event into a series of the last one with the same object,
//! type, reason and action, and keeps that first event's note: a second `DriftRepaired` naming
//! other objects, or an `ApplyFailed` with a new cause, would only raise the first event's count
//! and the user would read the old message. Here each (object, reason) keeps a recorder for the
//! note it published last: the same note again is a repeat (a series, as kube does it), a
//! different note a new event.

use std::{
    collections::HashMap,
    hash::{Hash, Hasher},
    sync::{Arc, Mutex},
};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    runtime::events::{Event, EventType, Recorder, Reporter},
};

/// Per (object, reason): a digest of the last note and type, and the recorder that published
/// it (whose cache makes a repeat of it a series).
type LastNotes = HashMap<(String, String), (u64, Arc<Recorder>)>;

/// The provider objects' event publisher.
pub struct Events {
    client: Client,
    reporter: Reporter,
    last: Mutex<LastNotes>,
}

fn digest(ev: &Event) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&ev.note, matches!(ev.type_, EventType::Warning), &ev.action).hash(&mut h);
    h.finish()
}

fn object_key(r: &ObjectReference) -> String {
    match &r.uid {
        Some(uid) => uid.clone(),
        None => format!(
            "{}/{}/{}",
            r.kind.as_deref().unwrap_or_default(),
            r.namespace.as_deref().unwrap_or_default(),
            r.name.as_deref().unwrap_or_default()
        ),
    }
}

impl Events {
    /// A publisher writing through `client` as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Events {
        Events {
            client,
            reporter,
            last: Mutex::default(),
        }
    }

    /// Publishes `ev` about `regarding`: a repeat of the last note of its reason raises that
    /// event's count; any other note is a new event.
    pub async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let key = (object_key(regarding), ev.reason.clone());
        let note = digest(ev);
        let recorder = {
            let mut last = self
                .last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match last.get(&key) {
                Some((n, r)) if *n == note => r.clone(),
                _ => {
                    let r = Arc::new(Recorder::new(self.client.clone(), self.reporter.clone()));
                    last.insert(key, (note, r.clone()));
                    r
                }
            }
        };
        recorder.publish(ev, regarding).await
    }

    /// Forgets what was published about `regarding`: called once the provider is gone, so
    /// that the memory holds only live providers however many come and go.
    pub fn forget(&self, regarding: &ObjectReference) {
        let object = object_key(regarding);
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        last.retain(|(o, _), _| *o != object);
    }

    /// How many (object, reason) notes are remembered.
    #[cfg(test)]
    pub fn remembered(&self) -> usize {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::testing::fake_api::FakeApi;

    fn event(note: &str) -> Event {
        Event {
            type_: EventType::Warning,
            reason: "DriftRepaired".into(),
            note: Some(note.into()),
            action: "Reconcile".into(),
            secondary: None,
        }
    }

    #[tokio::test]
    async fn a_new_note_is_a_new_event_and_a_repeat_a_series() {
        let fake = FakeApi::new();
        let events = Events::new(
            fake.client(),
            Reporter {
                controller: "test".into(),
                instance: None,
            },
        );
        let provider = ObjectReference {
            kind: Some("CoreProvider".into()),
            namespace: Some("ns".into()),
            name: Some("p".into()),
            uid: Some("u-1".into()),
            ..ObjectReference::default()
        };
        let notes = [
            "Deployment ns/d (changed by kubectl)",
            "Deployment ns/d (changed by kubectl)",
            "ServiceAccount ns/sa (deleted)",
        ];
        for n in notes {
            // The fake keeps no events, so the series' PATCH is answered 404; what matters here
            // is which request each publish sends.
            let _ = events.publish(&event(n), &provider).await;
        }
        let sent: Vec<(String, Option<String>)> = fake
            .requests()
            .into_iter()
            .filter(|r| r.path.contains("/events"))
            .map(|r| (r.method, r.body["note"].as_str().map(str::to_string)))
            .collect();
        assert_eq!(sent.len(), 3, "{sent:?}");
        assert_eq!(sent[0].0, "POST");
        assert_eq!(
            sent[1].0, "PATCH",
            "a repeat raises the first event's count"
        );
        assert_eq!(
            sent[2],
            ("POST".to_string(), Some(notes[2].to_string())),
            "another note is a new event, not a series of the first"
        );
    }
}
