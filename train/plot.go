//go:build llama

package train

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Point is one step of the loss curve: the training loss of the step's
// batch and, at evaluation steps, the dev split's loss (NaN otherwise).
type Point struct {
	Step  int
	Train float64
	Dev   float64
	// HasDev says Dev was measured at this step.
	HasDev bool
}

// SaveLossCurve draws the training loss (a moving average over a few
// steps, and the raw points) and the dev loss against the step, to a PNG
// at path (written atomically).
func SaveLossCurve(path, title string, pts []Point) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "step"
	p.Y.Label.Text = "loss (nats per target token)"
	p.Add(plotter.NewGrid())
	var raw, avg, dev plotter.XYs
	const window = 8
	sum, n := 0.0, 0
	var hist []float64
	for _, pt := range pts {
		if pt.Train == pt.Train { // not NaN
			raw = append(raw, plotter.XY{X: float64(pt.Step), Y: pt.Train})
			hist = append(hist, pt.Train)
			sum += pt.Train
			n++
			if len(hist) > window {
				sum -= hist[len(hist)-window-1]
				n--
			}
			avg = append(avg, plotter.XY{X: float64(pt.Step), Y: sum / float64(n)})
		}
		if pt.HasDev {
			dev = append(dev, plotter.XY{X: float64(pt.Step), Y: pt.Dev})
		}
	}
	if len(raw) > 0 {
		s, err := plotter.NewScatter(raw)
		if err != nil {
			return err
		}
		s.GlyphStyle.Color = color.RGBA{R: 120, G: 160, B: 220, A: 255}
		s.GlyphStyle.Radius = vg.Points(1.2)
		l, err := plotter.NewLine(avg)
		if err != nil {
			return err
		}
		l.Color = color.RGBA{B: 200, A: 255}
		l.Width = vg.Points(1.5)
		p.Add(s, l)
		p.Legend.Add("train (batch)", s)
		p.Legend.Add(fmt.Sprintf("train (mean of %d)", window), l)
	}
	if len(dev) > 0 {
		l, pts, err := plotter.NewLinePoints(dev)
		if err != nil {
			return err
		}
		l.Color = color.RGBA{R: 220, G: 80, A: 255}
		l.Width = vg.Points(1.5)
		pts.Color = l.Color
		p.Add(l, pts)
		p.Legend.Add("dev", l)
	}
	p.Legend.Top = true
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp.png")
	if err := p.Save(8*vg.Inch, 4.5*vg.Inch, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
