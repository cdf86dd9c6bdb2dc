//! Byte budgets of client-supplied bytes a node holds (issue 33): a cap on the whole node and a
//! smaller one per project, so no project can take the node's share alone. A [`Charge`] holds
//! its bytes until it is dropped (the trigger delivered, dead-lettered or dropped).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use skua_core::ProjectId;

/// Which cap refused a charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// The node's.
    Node,
    /// The project's.
    Project,
}

#[derive(Debug, Default)]
struct State {
    used: usize,
    projects: HashMap<ProjectId, usize>,
}

/// Bytes in use against a node cap and a per-project cap.
#[derive(Debug)]
pub struct ByteBudget {
    node: usize,
    per_project: usize,
    // std Mutex: a map update per charge, never held across an await.
    state: Mutex<State>,
}

/// Bytes taken from a [`ByteBudget`], given back when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<ByteBudget>,
    project: ProjectId,
    bytes: usize,
}

impl ByteBudget {
    /// A budget of `node` bytes, of which one project may take `per_project`.
    pub fn new(node: usize, per_project: usize) -> Arc<Self> {
        Arc::new(Self { node, per_project, state: Mutex::new(State::default()) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes `bytes` for `project` if both caps allow it.
    ///
    /// # Errors
    /// [`Over`]: the cap it would break; nothing is taken.
    pub fn charge(self: &Arc<Self>, project: &ProjectId, bytes: usize) -> Result<Charge, Over> {
        let mut s = self.lock();
        if s.used.saturating_add(bytes) > self.node {
            return Err(Over::Node);
        }
        let mine = s.projects.get(project).copied().unwrap_or(0);
        if mine.saturating_add(bytes) > self.per_project {
            return Err(Over::Project);
        }
        s.used += bytes;
        s.projects.insert(project.clone(), mine + bytes);
        Ok(Charge { budget: self.clone(), project: project.clone(), bytes })
    }

    /// Bytes in use now.
    pub fn used(&self) -> usize {
        self.lock().used
    }

    /// Bytes `project` uses now.
    pub fn used_by(&self, project: &ProjectId) -> usize {
        self.lock().projects.get(project).copied().unwrap_or(0)
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut s = self.budget.lock();
        s.used = s.used.saturating_sub(self.bytes);
        if let Some(n) = s.projects.get_mut(&self.project) {
            *n = n.saturating_sub(self.bytes);
            if *n == 0 {
                s.projects.remove(&self.project);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_is_held_to_its_share_and_dropped_charges_give_their_bytes_back() {
        let b = ByteBudget::new(1000, 600);
        let (p, q, r) =
            (ProjectId::parse("p").unwrap(), ProjectId::parse("q").unwrap(), ProjectId::parse("r").unwrap());
        let p1 = b.charge(&p, 500).unwrap();
        assert_eq!(b.charge(&p, 200).unwrap_err(), Over::Project, "p's share is 600");
        let q1 = b.charge(&q, 450).unwrap();
        assert_eq!(b.charge(&r, 100).unwrap_err(), Over::Node, "950 of 1000 used");
        let r1 = b.charge(&r, 50).unwrap();
        assert_eq!((b.used(), b.used_by(&p), b.used_by(&q)), (1000, 500, 450));
        drop(p1);
        assert_eq!((b.used(), b.used_by(&p)), (500, 0));
        let p2 = b.charge(&p, 500).unwrap();
        drop((q1, r1, p2));
        assert_eq!(b.used(), 0);
        assert_eq!(b.charge(&p, usize::MAX).unwrap_err(), Over::Node, "saturates");
    }
}
