//! The example's two SVG charts: test accuracy per epoch (one line per method), and final test
//! accuracy against time per epoch (one point per method, the cost/accuracy trade-off).

use std::fmt::Write;

/// One color per method, for up to 16 (the example's family and schedules together).
const COLORS: [&str; 16] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#aec7e8", "#ff9896", "#98df8a", "#c5b0d5", "#ffbb78", "#393b79",
];

/// A chart's frame: title, grid, axes and legend; maps data to pixels.
struct Frame {
    out: String,
    x_range: (f64, f64),
    y_floor: f64,
    legend_rows: usize,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const PLOT_W: f64 = WIDTH - LEFT - RIGHT;
const PLOT_H: f64 = HEIGHT - TOP - BOTTOM;

impl Frame {
    /// Test accuracy (from the tenth below `lowest` to 1) against `x_range`, with `x_ticks`.
    fn new(
        title: &str,
        x_label: &str,
        x_range: (f64, f64),
        x_ticks: &[(f64, String)],
        lowest: f64,
    ) -> Self {
        let mut frame = Self {
            out: String::new(),
            x_range,
            y_floor: (lowest * 10.0).floor() / 10.0,
            legend_rows: 0,
        };
        let out = &mut frame.out;
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            out,
            r#"<text x="{LEFT}" y="24" font-size="14">{title}</text>"#
        );
        // Horizontal grid lines every 0.05 (or 0.1 for wide ranges) of accuracy.
        let step = if 1.0 - frame.y_floor > 0.5 { 0.1 } else { 0.05 };
        let mut level = frame.y_floor;
        while level <= 1.0 + 1e-9 {
            let y = frame.y(level);
            let _ = writeln!(
                frame.out,
                r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{level:.2}</text>"##,
                LEFT + PLOT_W,
                LEFT - 6.0,
                y + 4.0,
            );
            level += step;
        }
        for (value, label) in x_ticks {
            let _ = writeln!(
                frame.out,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{label}</text>"#,
                frame.x(*value),
                TOP + PLOT_H + 18.0
            );
        }
        let _ = writeln!(
            frame.out,
            r#"<text x="{}" y="{}" text-anchor="middle">{x_label}</text><text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">test accuracy</text>"#,
            LEFT + PLOT_W / 2.0,
            HEIGHT - 10.0,
            TOP + PLOT_H / 2.0,
            TOP + PLOT_H / 2.0
        );
        frame
    }

    fn x(&self, value: f64) -> f64 {
        let (low, high) = self.x_range;
        LEFT + PLOT_W * (value - low) / (high - low)
    }

    fn y(&self, accuracy: f64) -> f64 {
        TOP + PLOT_H * (1.0 - (accuracy - self.y_floor) / (1.0 - self.y_floor))
    }

    /// The next legend entry, in the next color; returns that color.
    fn legend(&mut self, name: &str) -> &'static str {
        let color = COLORS[self.legend_rows % COLORS.len()];
        let y = TOP + 20.0 * self.legend_rows as f64 + 10.0;
        let _ = writeln!(
            self.out,
            r#"<line x1="{}" x2="{}" y1="{y}" y2="{y}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{name}</text>"#,
            WIDTH - RIGHT + 15.0,
            WIDTH - RIGHT + 40.0,
            WIDTH - RIGHT + 46.0,
            y + 4.0
        );
        self.legend_rows += 1;
        color
    }

    fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// One line per method: its name and the mean test accuracy after each epoch.
pub fn svg(title: &str, curves: &[(String, Vec<f64>)]) -> String {
    let epochs = curves
        .iter()
        .map(|(_, c)| c.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let lowest = curves
        .iter()
        .flat_map(|(_, c)| c)
        .fold(1.0_f64, |a, &b| a.min(b));
    let ticks: Vec<(f64, String)> = (1..=epochs)
        .filter(|e| *e == 1 || e % (epochs / 6).max(1) == 0)
        .map(|e| (e as f64, e.to_string()))
        .collect();
    let mut frame = Frame::new(title, "epoch", (1.0, epochs as f64), &ticks, lowest);
    for (name, curve) in curves {
        let color = frame.legend(name);
        let points: Vec<String> = curve
            .iter()
            .enumerate()
            .map(|(e, &a)| format!("{:.1},{:.1}", frame.x(e as f64 + 1.0), frame.y(a)))
            .collect();
        let _ = writeln!(
            frame.out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
    }
    frame.finish()
}

/// One point per method: (name, seconds per epoch, mean final test accuracy, its sd), with a
/// bar of one sd.
pub fn trade_off_svg(title: &str, points: &[(String, f64, f64, f64)]) -> String {
    let slowest = points.iter().fold(0.0_f64, |a, p| a.max(p.1)) * 1.15;
    let lowest = points
        .iter()
        .fold(1.0_f64, |a, p| a.min(p.2 - p.3))
        .max(0.0);
    let ticks: Vec<(f64, String)> = (0..=5)
        .map(|i| {
            let seconds = slowest * i as f64 / 5.0;
            (seconds, format!("{seconds:.3}"))
        })
        .collect();
    let mut frame = Frame::new(title, "seconds per epoch", (0.0, slowest), &ticks, lowest);
    for (name, seconds, mean, sd) in points {
        let color = frame.legend(name);
        let (x, y) = (frame.x(*seconds), frame.y(*mean));
        let (high, low) = (
            frame.y((mean + sd).min(1.0)),
            frame.y((mean - sd).max(lowest)),
        );
        let _ = writeln!(
            frame.out,
            r#"<line x1="{x:.1}" x2="{x:.1}" y1="{high:.1}" y2="{low:.1}" stroke="{color}" stroke-width="2"/><circle cx="{x:.1}" cy="{y:.1}" r="5" fill="{color}"/>"#
        );
    }
    frame.finish()
}
