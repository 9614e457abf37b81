//! [`fallible!`]: the crate's one API convention, written once. Every
//! fallible method has a `try_` form that returns `Result` and a plain
//! form that panics with the same error at the caller's line.

/// Defines a method pair from one body: `fn try_name / name(args) -> T
/// { body }` gives `try_name`, returning `Result<T>` from `body`, with the
/// doc comments given, and `name`, returning `T` and panicking with the
/// error at the caller's line (`#[track_caller]`). Methods with a receiver
/// take `&self`; without one, the plain form calls `Self::try_name`.
#[doc(hidden)]
#[macro_export]
macro_rules! fallible {
    (
        $(#[$attr:meta])*
        $vis:vis fn $try_name:ident / $name:ident
        $(<$($gen:ident : $bound:path),+>)?
        (&$self:ident $(, $arg:ident : $ty:ty)* $(,)?) -> $ret:ty $body:block
    ) => {
        $(#[$attr])*
        #[track_caller]
        #[inline]
        $vis fn $try_name $(<$($gen: $bound),+>)? (&$self $(, $arg: $ty)*) -> $crate::Result<$ret> $body

        #[doc = concat!(
            "Like [`", stringify!($try_name), "`](Self::", stringify!($try_name),
            "), but panics with its error at the caller's line."
        )]
        #[track_caller]
        #[inline]
        $vis fn $name $(<$($gen: $bound),+>)? (&$self $(, $arg: $ty)*) -> $ret {
            $crate::base::error::or_panic($self.$try_name($($arg),*))
        }
    };
    (
        $(#[$attr:meta])*
        $vis:vis fn $try_name:ident / $name:ident
        $(<$($gen:ident : $bound:path),+>)?
        ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty $body:block
    ) => {
        $(#[$attr])*
        #[track_caller]
        #[inline]
        $vis fn $try_name $(<$($gen: $bound),+>)? ($($arg: $ty),*) -> $crate::Result<$ret> $body

        #[doc = concat!(
            "Like [`", stringify!($try_name), "`](Self::", stringify!($try_name),
            "), but panics with its error at the caller's line."
        )]
        #[track_caller]
        #[inline]
        $vis fn $name $(<$($gen: $bound),+>)? ($($arg: $ty),*) -> $ret {
            $crate::base::error::or_panic(Self::$try_name($($arg),*))
        }
    };
}
pub use crate::fallible;
