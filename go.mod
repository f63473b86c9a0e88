module github.com/macpd/macpd

go 1.25
