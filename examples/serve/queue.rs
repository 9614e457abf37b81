//! The bounded queue between the HTTP handlers and a model's worker
//! thread: a handler's push fails at once when the queue is full (the
//! route answers 429 with `Retry-After`) or closed (the server is
//! stopping: 503), so a burst of clients never grows memory or latency
//! without bound. The worker blocks on it while it has nothing to do.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// Why a push was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    Full,
    Closed,
}

#[derive(Debug)]
struct State<T> {
    items: VecDeque<T>,
    closed: bool,
}

/// A first-in first-out queue of at most `capacity` items.
#[derive(Debug)]
pub struct BoundedQueue<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    capacity: usize,
}

impl<T> BoundedQueue<T> {
    pub fn new(capacity: usize) -> Self {
        BoundedQueue {
            state: Mutex::new(State {
                items: VecDeque::new(),
                closed: false,
            }),
            ready: Condvar::new(),
            capacity,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `item`, or gives it back with the reason.
    pub fn push(&self, item: T) -> Result<usize, (T, Refused)> {
        let mut s = self.lock();
        if s.closed {
            return Err((item, Refused::Closed));
        }
        if s.items.len() >= self.capacity {
            return Err((item, Refused::Full));
        }
        s.items.push_back(item);
        let depth = s.items.len();
        drop(s);
        self.ready.notify_one();
        Ok(depth)
    }

    /// The oldest item, waiting for one; `None` once the queue is closed
    /// and empty.
    pub fn pop_wait(&self) -> Option<T> {
        let mut s = self.lock();
        loop {
            if let Some(item) = s.items.pop_front() {
                return Some(item);
            }
            if s.closed {
                return None;
            }
            s = self.ready.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The oldest item if one comes by `deadline`.
    pub fn pop_until(&self, deadline: Instant) -> Option<T> {
        let mut s = self.lock();
        loop {
            if let Some(item) = s.items.pop_front() {
                return Some(item);
            }
            let now = Instant::now();
            if s.closed || now >= deadline {
                return None;
            }
            s = self
                .ready
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The oldest item, if any, without waiting.
    pub fn try_pop(&self) -> Option<T> {
        self.lock().items.pop_front()
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// Refuses new items from now on; the worker drains what is there.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn full_closed_and_drained() {
        let q = BoundedQueue::new(2);
        assert_eq!(q.push(1), Ok(1));
        assert_eq!(q.push(2), Ok(2));
        assert_eq!(q.push(3), Err((3, Refused::Full)));
        assert_eq!(q.try_pop(), Some(1));
        q.close();
        assert_eq!(q.push(4), Err((4, Refused::Closed)));
        assert_eq!(q.pop_wait(), Some(2));
        assert_eq!(q.pop_wait(), None);
        assert_eq!(q.pop_until(Instant::now() + Duration::from_millis(1)), None);
    }
}
