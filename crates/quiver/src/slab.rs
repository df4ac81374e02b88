//! A generation-checked slab for posted requests: O(1) insert/remove, no allocation once
//! warmed up, and a stale handle can never reach a reused entry.

#[derive(Debug)]
struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

/// Storage for values addressed by (index, generation) keys.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
}

/// A key into a [`Slab`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    index: u32,
    generation: u32,
}

impl<T> Slab<T> {
    pub(crate) fn new() -> Slab<T> {
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
        }
    }

    pub(crate) fn insert(&mut self, value: T) -> Key {
        if let Some(index) = self.free.pop() {
            let e = &mut self.entries[index as usize];
            e.generation = e.generation.wrapping_add(1);
            e.value = Some(value);
            Key {
                index,
                generation: e.generation,
            }
        } else {
            let index = self.entries.len() as u32;
            self.entries.push(Entry {
                generation: 0,
                value: Some(value),
            });
            Key {
                index,
                generation: 0,
            }
        }
    }

    pub(crate) fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        let e = self.entries.get_mut(key.index as usize)?;
        if e.generation == key.generation {
            e.value.as_mut()
        } else {
            None
        }
    }

    pub(crate) fn remove(&mut self, key: Key) -> Option<T> {
        let e = self.entries.get_mut(key.index as usize)?;
        if e.generation != key.generation {
            return None;
        }
        let v = e.value.take()?;
        self.free.push(key.index);
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_miss() {
        let mut s = Slab::new();
        let a = s.insert(1);
        assert_eq!(s.remove(a), Some(1));
        let b = s.insert(2);
        assert_eq!(s.get_mut(a), None);
        assert_eq!(s.remove(a), None);
        assert_eq!(s.get_mut(b), Some(&mut 2));
    }
}
