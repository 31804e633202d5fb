//! Reports of an analysis ([`wirelab_analyze::report::Report`]): a terminal
//! summary (short, or every finding with `-v`) and one self-contained HTML
//! page whose plots are inline SVG drawn by plotters.

pub mod html;
pub mod terminal;
